"""Consumer groups: the classic group protocol's coordinator, persisted in the metadata store.

See :mod:`kafscale.groups.coordinator` for placement and loading,
:mod:`kafscale.groups.membership` for the state machine, :mod:`kafscale.groups.offsets` for
committed offsets and :mod:`kafscale.groups.store` for what is stored where.
"""

from kafscale.groups.coordinator import (
    GROUP_APIS,
    GroupCoordinator,
    error_answer,
    fetch_offsets_failure,
)

__all__ = ["GROUP_APIS", "GroupCoordinator", "error_answer", "fetch_offsets_failure"]
