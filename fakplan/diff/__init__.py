"""A shape change as a reviewed narrative: what moved, and what it costs.

Seed 004's commit message is the model: every declared value that moved, then
every derived figure that moved with it (rate, contract, tokens backed,
sessions, pair, ceiling, unclaimed), the gates that flipped and the
predictions the change makes. A shape that is new is gated in full, a deleted
one lists the predictions (and recorded verdicts) it retires, and a rename is
diffed as a change: no shape slips past review by moving, appearing or going.

By concern: ``compare`` (``diff_sides``, pure), ``narrative`` (the words, pure),
``git`` (``shape_changes``: which shapes changed since a revision) and ``review``
(loads and compiles both sides of one).
"""

from fakplan.diff.compare import Change, ShapeDiff, Side, Status, diff_plans, diff_sides, retire
from fakplan.diff.git import GitRevision, Touched, shape_changes
from fakplan.diff.narrative import narrative
from fakplan.diff.review import review

__all__ = [
    "Change",
    "GitRevision",
    "ShapeDiff",
    "Side",
    "Status",
    "Touched",
    "diff_plans",
    "diff_sides",
    "narrative",
    "retire",
    "review",
    "shape_changes",
]
