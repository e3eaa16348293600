"""The releases pd-doctor's help texts and hints name as examples (stdlib only: read at
`--help` time): the releases its tests provision, one that truncates late, one that is fixed.

A release number written anywhere else in the package is a test failure
(tests/knowledge/test_knowledge_literals.py).
"""

from __future__ import annotations

LATE = "0.28.0"
"""A release whose connectors truncate after the lookup (#53514 fires)."""
OLDER = "0.27.1"
"""An older release that truncates late too."""
FIXED = "0.32.0"
"""A release that truncates before the lookup."""
RANGE_LOW = "0.24.0"
"""The low end of an example range of releases."""
