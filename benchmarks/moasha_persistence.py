"""A what-if for ``moasha``: a configuration stops only when it is dominated beyond noise at
two consecutive looks (its previous look, at this rung or the one before, said so too), so a
single early standing cannot stop it. It replays :func:`search_figures.outcomes` (what a
researcher keeps and pays, with every seed and with one) with :meth:`MoAsha._decide` wrapped
in this process; the registered rule is untouched and no file is written.

    .venv/bin/python benchmarks/moasha_persistence.py --replays 10 --only seeds-100x5x9
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import search_figures  # noqa: E402

from lipsweep.search.schedulers import moasha  # noqa: E402

_rule = moasha.MoAsha._decide


def _persistent(self: moasha.MoAsha, i: int, group: str) -> Optional[Any]:
    """``moasha``'s decision, but a stop only on the second consecutive look that calls for
    one."""
    looks = self.__dict__.setdefault("_dominated_last_look", {})
    reason = _rule(self, i, group)
    last, looks[group] = looks.get(group, False), reason is not None
    return reason if last else None


if __name__ == "__main__":
    moasha.MoAsha._decide = _persistent  # forked replay processes inherit it
    sys.exit(search_figures.main(["--outcomes", "--method", "moasha", "--grace-period", "1",
                                  "--processes", "1", *sys.argv[1:]]))  # fmt: skip
