"""Which committed offsets have expired, and which groups are gone: Kafka's rules since 2.1
(KIP-211), run by the coordinator every ``offsets_retention_check_interval_ms`` with
``offsets_retention_minutes`` as the retention:

- An Empty group that had members (it has a protocol type): all its offsets expire together,
  retention after the group became Empty. A group whose record does not say when (stored before
  that was kept) counts from each offset's commit instead, as Kafka does for old records.
- A group that never had members (a simple consumer's, which only commits): each offset
  expires retention after its commit.
- A Stable group of the consumer protocol: offsets of topics no member subscribes to expire
  retention after their commit (none if a subscription cannot be read).
- Any other group (rebalancing, or members of another protocol): nothing expires.
- An Empty group with no offsets left (and no member id handed out) is removed: its record is
  deleted and the coordinator forgets it.

Not taken over from Kafka: the retention time of OffsetCommit v2-v4 (deprecated by Kafka since
2.1) is ignored, so every offset has the broker's retention.
"""

from __future__ import annotations

from kafscale.groups.model import Group, GroupState
from kafscale.groups.offset_delete import CONSUMER_PROTOCOL, group_subscriptions

__all__ = ["expired_offsets", "removable"]


def expired_offsets(group: Group, now_ms: int, retention_ms: int) -> list[tuple[str, int]]:
    """The partitions whose committed offsets have expired at ``now_ms``."""
    if group.is_(GroupState.EMPTY):
        if group.protocol_type is not None and group.empty_since_ms is not None:
            if group.empty_since_ms + retention_ms <= now_ms:
                return list(group.offsets)
            return []
        return _older_than(group, now_ms - retention_ms, set())
    if group.is_(GroupState.STABLE) and group.protocol_type == CONSUMER_PROTOCOL:
        subscribed = group_subscriptions(group)
        if subscribed is None:
            return []
        return _older_than(group, now_ms - retention_ms, subscribed)
    return []


def _older_than(group: Group, cutoff_ms: int, keep_topics: set[str]) -> list[tuple[str, int]]:
    return [
        key
        for key, committed in group.offsets.items()
        if committed.commit_timestamp_ms <= cutoff_ms and key[0] not in keep_topics
    ]


def removable(group: Group, expired: list[tuple[str, int]]) -> bool:
    """Whether ``group`` is gone once ``expired`` offsets are: stored, Empty, and holding
    nothing else (no offset left, no member id handed out)."""
    return (
        group.revision > 0
        and group.is_(GroupState.EMPTY)
        and not group.members
        and not group.pending_members
        and len(expired) == len(group.offsets)
    )
