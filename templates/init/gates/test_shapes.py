"""Every gate over ../shapes/, one test item per gate per shape: `pytest gates/`.

Items read `gates/test_shapes.py::<shape name>::<gate id>`. A shape kept on
purpose although a gate refuses it (a before-shape, say) gets an xfail entry
`"<shape name>::<gate id>": "why"`; it is strict, so the suite says when the
gate starts to hold.
"""

from __future__ import annotations

from fakplan.gates.pytest_plugin import ShapeSuite

test_shapes = ShapeSuite("../shapes", xfail={})
