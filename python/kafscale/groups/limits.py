"""What one member may bring into a group, checked before it is taken in, so that one member's
input can never break the answers to the others nor the group's stored record:

- every name that is echoed to other members (group id, group instance id, protocol type and
  names) fits the int16 length of a non-flexible string, so every version can encode it;
- member ids are short whatever the client id (Kafka builds them as ``{client id}-{uuid}``; the
  client-id part is cut here);
- protocol metadata and assignments are bounded per member
  (``group_max_member_metadata_bytes``), the group's stored record as a whole
  (``group_max_metadata_bytes``, so it fits the metadata store's request limit) and the number
  of members (``group_max_size``, Kafka's ``group.max.size``);
- what one broker keeps for all clients together: the number of groups it coordinates
  (``group_max_count``) and of partitions one group holds committed offsets for
  (``group_max_committed_offsets``). Kafka bounds neither; OffsetCommit past them answers
  INVALID_COMMIT_OFFSET_SIZE (Kafka's answer when its offsets log cannot take a commit, which
  clients raise to the application instead of retrying), JoinGroup GROUP_MAX_SIZE_REACHED.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kafscale.api_keys import ApiKey
from kafscale.config import env_var, flag
from kafscale.errors import ErrorCode
from kafscale.log_limit import LogLimit

if TYPE_CHECKING:
    from kafscale import _core

__all__ = [
    "MAX_WIRE_STRING_BYTES",
    "MEMBER_ID_PREFIX_BYTES",
    "GroupLimits",
    "Refusal",
    "join_refusal",
    "log_refusal",
    "new_group_refusal",
    "new_member_id",
    "offsets_cap_reason",
    "oversized_name",
    "setting_name",
]

# Non-flexible versions encode a string with an int16 length.
MAX_WIRE_STRING_BYTES = 32_767
# The most of a client id (or group instance id) a generated member id keeps. The uuid after it
# keeps ids unique; a long prefix would only make every answer listing members longer.
MEMBER_ID_PREFIX_BYTES = 255
# How much of a client-chosen name a log line quotes.
_QUOTED_CHARS = 100

log = logging.getLogger(__name__)
# Any client can have its requests refused, as often as it likes.
_REFUSALS = LogLimit("refused group requests")


class LimitSettings(Protocol):
    @property
    def group_max_member_metadata_bytes(self) -> int: ...
    @property
    def group_max_metadata_bytes(self) -> int: ...
    @property
    def group_max_size(self) -> int: ...
    @property
    def group_max_count(self) -> int: ...
    @property
    def group_max_committed_offsets(self) -> int: ...


@dataclass(frozen=True)
class GroupLimits:
    member_metadata_bytes: int
    group_record_bytes: int
    members: int
    groups: int
    committed_offsets: int

    @classmethod
    def of(cls, settings: LimitSettings) -> GroupLimits:
        return cls(
            settings.group_max_member_metadata_bytes,
            settings.group_max_metadata_bytes,
            settings.group_max_size,
            settings.group_max_count,
            settings.group_max_committed_offsets,
        )


@dataclass(frozen=True)
class Refusal:
    """A request refused at the door: the Kafka error code for the client and, for the log
    (the group APIs carry no error message), what went wrong and what to do."""

    code: int
    reason: str


def setting_name(name: str) -> str:
    return f"{name} ({flag(name)} / {env_var(name)})"


def quoted(text: str) -> str:
    """A client-chosen name for a log line: quoted, and cut if long."""
    if len(text) <= _QUOTED_CHARS:
        return repr(text)
    return f"{text[:_QUOTED_CHARS]!r}... ({len(text.encode())} bytes)"


def log_refusal(group_id: str, client_id: str | None, reason: str) -> None:
    """The log line for a refused group request: the group APIs carry no error message, so
    this is where an operator learns what went wrong and which setting to raise (at most
    a few times a second: a client retrying in a loop must not flood the log)."""
    if not _REFUSALS.admit():
        return
    log.warning(
        "refused a request of client %s to group %s: %s",
        quoted(client_id or ""),
        quoted(group_id),
        reason,
    )


def new_member_id(prefix: str) -> str:
    """Kafka's ``{client id}-{uuid}``, with at most MEMBER_ID_PREFIX_BYTES of the prefix."""
    cut = prefix.encode()[:MEMBER_ID_PREFIX_BYTES].decode(errors="ignore")
    return f"{cut}-{uuid.uuid4()}"


def oversized_name(names: Iterable[tuple[str, str | None]]) -> str | None:
    """The first ``(what, name)`` too long for a non-flexible string, described for the log."""
    for what, name in names:
        if name is not None and len(name.encode()) > MAX_WIRE_STRING_BYTES:
            return (
                f"its {what} {quoted(name)} is longer than {MAX_WIRE_STRING_BYTES} bytes, "
                "which older clients could not read back"
            )
    return None


def protocols_bytes(protocols: Iterable[tuple[str, bytes]]) -> int:
    """A member's protocol metadata as the per-member limit counts it: every protocol's name
    and metadata (a member may name many protocols)."""
    return sum(len(name.encode()) + len(metadata) for name, metadata in protocols)


def join_refusal(req: _core.JoinGroupRequest, limits: GroupLimits) -> Refusal | None:
    """What makes a JoinGroup unacceptable whatever the group's state, if anything."""
    problem = oversized_name(
        [
            ("group instance id", req.group_instance_id),
            ("protocol type", req.protocol_type),
            *(("protocol name", p.name) for p in req.protocols),
        ]
    )
    if problem:
        return Refusal(ErrorCode.INVALID_REQUEST, problem)
    size = protocols_bytes((p.name, p.metadata) for p in req.protocols)
    if size > limits.member_metadata_bytes:
        return Refusal(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"its protocol metadata is {size} bytes, more than "
            f"{setting_name('group_max_member_metadata_bytes')} = "
            f"{limits.member_metadata_bytes}; raise the setting if members this large are "
            "expected",
        )
    return None


def new_group_refusal(api_key: ApiKey, coordinated: int, limits: GroupLimits) -> Refusal | None:
    """Why a request that would create a group is refused while this broker already
    coordinates ``coordinated`` groups, if it is."""
    if coordinated < limits.groups:
        return None
    code = (
        ErrorCode.GROUP_MAX_SIZE_REACHED
        if api_key == ApiKey.JOIN_GROUP
        else ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    )
    return Refusal(
        code,
        f"it would be a new group and this broker already coordinates {coordinated} groups, "
        f"{setting_name('group_max_count')} = {limits.groups}; raise the setting, delete unused "
        "groups, or lower offsets_retention_minutes so that empty groups expire sooner",
    )


def offsets_cap_reason(refused: int, limits: GroupLimits) -> str:
    """The log's reason for refusing ``refused`` partitions new to a group at its cap."""
    return (
        f"{refused} partition(s) would take the group past "
        f"{setting_name('group_max_committed_offsets')} = {limits.committed_offsets} partitions "
        "with committed offsets; raise the setting or delete offsets no longer used"
    )
