"""A process's own peak memory, for tests that bound it.

``getrusage(RUSAGE_SELF).ru_maxrss`` is the wrong figure in a child: Linux keeps it
across fork and exec, so a child of a large test process reports the parent's peak.
``VmHWM`` in /proc/self/status belongs to the address space the process has now, which
exec replaces, so it is the child's own.
"""

from __future__ import annotations

import resource
from pathlib import Path

# runs `fakplan ARGS` in this interpreter and writes its own peak (MiB) to argv[1] at exit
RUN_FAKPLAN = (
    "import atexit, runpy, sys\n"
    "from tests.support.peakrss import write_peak\n"
    "atexit.register(write_peak, sys.argv.pop(1))\n"
    "runpy.run_module('fakplan', run_name='__main__', alter_sys=True)\n"
)


def peak_mib() -> float:
    """This process's peak resident set since its last exec, in MiB."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_peak(path: str) -> None:
    Path(path).write_text(f"{peak_mib():.1f}\n")
