"""Edges of core/findings.py the report relies on but no design of the other tests reached
(mutation testing: bench/README.md, "Fourth round")."""

from __future__ import annotations

import numpy as np
import pytest

from orchestrator.core import clustered, findings


def test_a_level_mask_shared_by_every_contrast_cannot_be_changed_in_place() -> None:
    """_Grid keeps one mask per (factor, level) for every contrast of the sweep; a caller writing
    into it (an `&=` on the mask itself rather than a copy) would silently drop cells from every
    later contrast. It is read-only, and a second ask returns the same, unchanged mask."""
    cells = {(("a", "off"),): (1, 10), (("a", "on"),): (4, 10)}
    grid = findings._Grid(cells)
    mask = grid._is("a", "on")
    assert mask.tolist() == [False, True]
    with pytest.raises(ValueError):
        mask &= False
    assert grid._is("a", "on") is mask and mask.tolist() == [False, True]
    unknown = grid._is("a", "missing")
    assert unknown.tolist() == [False, False] and not unknown.flags.writeable


def test_no_contrast_to_read_off_stopped_cells_gives_none() -> None:
    """stopped_mover of no contrasts: no interval and no p (not a crash on an empty max)."""
    intervals, p = findings.stopped_mover([], clustered.cell_bounds)
    assert intervals == [] and isinstance(p, np.ndarray) and p.shape == (0,)
