"""Raw ACL requests in the style of kafka_wire: DescribeAcls (29), CreateAcls (30) and
DeleteAcls (31), versions 0-3 (v1 adds the pattern type, KIP-290; v2 is the first flexible
version), and the codes of Kafka's resource types, pattern types, operations and permissions.

The layouts follow Kafka's message definitions (DescribeAclsRequest/Response.json,
CreateAclsRequest/Response.json, DeleteAclsRequest/Response.json); nothing here comes from
kafscale. A v0 request has no pattern type: Kafka reads it as LITERAL, and v0 answers leave it
out (reported here as LITERAL).
"""

from __future__ import annotations

from dataclasses import dataclass

from .kafka_wire import RawConnection, Reader, Writer

DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31
VERSIONS = (0, 1, 2, 3)

# resource types (Kafka's ResourceType codes)
ANY = 1  # also the ANY pattern type, operation and permission: code 1 everywhere
TOPIC = 2
GROUP = 3
CLUSTER = 4
TRANSACTIONAL_ID = 5

# pattern types
MATCH = 2
LITERAL = 3
PREFIXED = 4

# operations
ALL = 2
READ = 3
WRITE = 4
CREATE = 5
DELETE = 6
ALTER = 7
DESCRIBE = 8
IDEMPOTENT_WRITE = 12

# permissions
DENY = 2
ALLOW = 3

CLUSTER_NAME = "kafka-cluster"


@dataclass(frozen=True)
class Acl:
    """A binding as the APIs carry it (codes, not names)."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int


@dataclass(frozen=True)
class AclFilter:
    """A DescribeAcls / DeleteAcls filter: None and ANY match everything."""

    resource_type: int = ANY
    resource_name: str | None = None
    pattern_type: int = ANY
    principal: str | None = None
    host: str | None = None
    operation: int = ANY
    permission: int = ANY


class _Out:
    """A Writer that writes strings and arrays the way the version wants them."""

    def __init__(self, version: int) -> None:
        self.flexible = version >= 2
        self.w = Writer()

    def string(self, v: str | None) -> _Out:
        if self.flexible:
            self.w.compact_string(v)
        else:
            self.w.string(v)
        return self

    def array(self, n: int) -> _Out:
        if self.flexible:
            self.w.uvarint(n + 1)
        else:
            self.w.array_len(n)
        return self

    def i8(self, v: int) -> _Out:
        self.w.i8(v)
        return self

    def end(self) -> _Out:
        """The end of a structure: its tagged fields (flexible versions)."""
        if self.flexible:
            self.w.tagged_fields()
        return self

    def done(self) -> bytes:
        return self.w.done()


class _In:
    def __init__(self, version: int, r: Reader) -> None:
        self.flexible = version >= 2
        self.r = r

    def string(self) -> str | None:
        return self.r.compact_string() if self.flexible else self.r.string()

    def array(self) -> int:
        return self.r.compact_array_len() if self.flexible else self.r.array_len()

    def end(self) -> None:
        if self.flexible:
            self.r.skip_tagged_fields()

    def finish(self, what: str) -> None:
        if self.r.remaining():
            raise AssertionError(f"{self.r.remaining()} unexpected bytes after {what}")


def _request(conn: RawConnection, api_key: int, version: int, body: bytes) -> Reader:
    if version not in VERSIONS:
        raise ValueError(f"the ACL APIs have versions {VERSIONS}")
    return conn.request(api_key, version, body, flexible=version >= 2)


def _filter(out: _Out, f: AclFilter, version: int) -> None:
    out.i8(f.resource_type).string(f.resource_name)
    if version >= 1:
        out.i8(f.pattern_type)
    out.string(f.principal).string(f.host).i8(f.operation).i8(f.permission)


# ---------------------------------------------------------------------------------------------
# CreateAcls


@dataclass
class Outcome:
    error_code: int
    error_message: str | None


def create_acls(conn: RawConnection, acls: list[Acl], version: int = 1) -> list[Outcome]:
    out = _Out(version).array(len(acls))
    for a in acls:
        out.i8(a.resource_type).string(a.resource_name)
        if version >= 1:
            out.i8(a.pattern_type)
        elif a.pattern_type != LITERAL:
            raise ValueError("CreateAcls v0 creates literal ACLs only")
        out.string(a.principal).string(a.host).i8(a.operation).i8(a.permission).end()
    r = _In(version, _request(conn, CREATE_ACLS, version, out.end().done()))
    r.r.i32()  # throttle
    results = []
    for _ in range(r.array()):
        results.append(Outcome(r.r.i16(), r.string()))
        r.end()
    r.end()
    r.finish(f"CreateAcls v{version}")
    return results


# ---------------------------------------------------------------------------------------------
# DescribeAcls


@dataclass
class Described:
    error_code: int
    error_message: str | None
    acls: list[Acl]


def describe_acls(conn: RawConnection, f: AclFilter, version: int = 1) -> Described:
    out = _Out(version)
    _filter(out, f, version)
    r = _In(version, _request(conn, DESCRIBE_ACLS, version, out.end().done()))
    r.r.i32()  # throttle
    error, message = r.r.i16(), r.string()
    acls = []
    for _ in range(r.array()):
        resource_type, name = r.r.i8(), r.string() or ""
        pattern = r.r.i8() if version >= 1 else LITERAL
        for _ in range(r.array()):
            principal, host = r.string() or "", r.string() or ""
            operation, permission = r.r.i8(), r.r.i8()
            r.end()
            acls.append(Acl(resource_type, name, pattern, principal, host, operation, permission))
        r.end()
    r.end()
    r.finish(f"DescribeAcls v{version}")
    return Described(error, message, acls)


# ---------------------------------------------------------------------------------------------
# DeleteAcls


@dataclass
class Deleted:
    error_code: int
    error_message: str | None
    acls: list[tuple[int, Acl]]  # (error code of the ACL's deletion, the ACL)


def delete_acls(conn: RawConnection, filters: list[AclFilter], version: int = 1) -> list[Deleted]:
    out = _Out(version).array(len(filters))
    for f in filters:
        _filter(out, f, version)
        out.end()
    r = _In(version, _request(conn, DELETE_ACLS, version, out.end().done()))
    r.r.i32()  # throttle
    results = []
    for _ in range(r.array()):
        error, message = r.r.i16(), r.string()
        matching = []
        for _ in range(r.array()):
            acl_error, _message = r.r.i16(), r.string()
            resource_type, name = r.r.i8(), r.string() or ""
            pattern = r.r.i8() if version >= 1 else LITERAL
            principal, host = r.string() or "", r.string() or ""
            operation, permission = r.r.i8(), r.r.i8()
            r.end()
            acl = Acl(resource_type, name, pattern, principal, host, operation, permission)
            matching.append((acl_error, acl))
        r.end()
        results.append(Deleted(error, message, matching))
    r.end()
    r.finish(f"DeleteAcls v{version}")
    return results
