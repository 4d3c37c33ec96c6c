"""The ledger: every measurement and verdict, in SQLite on the controller.

Three tables: ``runs`` (one benchmark result: host, model, hardware, vLLM
release, unit/config hash, workload, phase/arm label), ``trials`` (one row per
trial of a run, with its metrics as JSON) and ``verdicts`` (one judge outcome,
pointing at the baseline and candidate runs when known). ``schema_version``
holds the applied migrations; :func:`connect` applies the missing ones, so an
old ledger file is upgraded in place.

Only the standard library is used (sqlite3); timestamps are UTC ISO-8601
strings, which sort and compare as text.

A file that is not a ledger this benchgate can use (not SQLite, another
program's database, a damaged or newer ledger) raises :class:`LedgerError`
naming the file, before anything is written to it. A new ledger file is
created mode 0600 (SQLite gives its journal the same mode): it holds the
fleet's hosts, releases and measurements.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Union

DbLike = Union[str, Path, sqlite3.Connection]

#: Ordered migrations; index + 1 is the schema version each one produces.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE runs (
        id              INTEGER PRIMARY KEY AUTOINCREMENT,
        recorded_at     TEXT NOT NULL,
        started_at      TEXT,
        finished_at     TEXT,
        host            TEXT NOT NULL,
        phase           TEXT NOT NULL,
        model           TEXT,
        release         TEXT,
        hardware_json   TEXT,
        unit_hash       TEXT,
        workload_name   TEXT,
        workload_hash   TEXT,
        schema          TEXT,
        summary_json    TEXT,
        result_sha256   TEXT NOT NULL
    );
    CREATE INDEX runs_host_time ON runs (host, recorded_at);
    CREATE INDEX runs_release ON runs (release);
    CREATE TABLE trials (
        id              INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id          INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        idx             INTEGER NOT NULL,
        valid           INTEGER NOT NULL,
        metrics_json    TEXT NOT NULL,
        UNIQUE (run_id, idx)
    );
    CREATE TABLE verdicts (
        id                  INTEGER PRIMARY KEY AUTOINCREMENT,
        recorded_at         TEXT NOT NULL,
        host                TEXT NOT NULL,
        release             TEXT,
        baseline_release    TEXT,
        phase               TEXT,
        verdict             TEXT NOT NULL CHECK (verdict IN ('PASS', 'FAIL', 'INCONCLUSIVE')),
        reasons_json        TEXT NOT NULL,
        details_json        TEXT,
        baseline_run_id     INTEGER REFERENCES runs (id),
        candidate_run_id    INTEGER REFERENCES runs (id)
    );
    CREATE INDEX verdicts_host_time ON verdicts (host, recorded_at);
    """,
    # 2: the speculative config a run measured ({} = off), and the A/B choices.
    """
    ALTER TABLE runs ADD COLUMN speculative_json TEXT;
    CREATE TABLE ab_choices (
        id              INTEGER PRIMARY KEY AUTOINCREMENT,
        recorded_at     TEXT NOT NULL,
        host            TEXT NOT NULL,
        release         TEXT,
        objective       TEXT NOT NULL,
        winner          TEXT,
        config_json     TEXT NOT NULL,
        reason          TEXT NOT NULL,
        arms_json       TEXT NOT NULL
    );
    CREATE INDEX ab_choices_host_time ON ab_choices (host, recorded_at);
    """,
    # 3: staged workloads: the stage of every trial (NULL: unstaged), and the
    # result's per-stage block (each stage's load and summary).
    """
    ALTER TABLE trials ADD COLUMN stage TEXT;
    ALTER TABLE runs ADD COLUMN stages_json TEXT;
    """,
    # 4: what happened to a host apart from a verdict: lost (unreachable, or
    # failed before its verdict) during a rolling upgrade.
    """
    CREATE TABLE host_events (
        id              INTEGER PRIMARY KEY AUTOINCREMENT,
        recorded_at     TEXT NOT NULL,
        host            TEXT NOT NULL,
        run_name        TEXT,
        release         TEXT,
        event           TEXT NOT NULL CHECK (event IN ('lost')),
        reason          TEXT NOT NULL
    );
    CREATE INDEX host_events_host_time ON host_events (host, recorded_at);
    """,
    # 5: the serving configuration a run measured (the result's server_config:
    # the server's argv, environment and CPUs; NULL: not known).
    """
    ALTER TABLE runs ADD COLUMN server_json TEXT;
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)


def utcnow() -> str:
    """Current UTC time as ISO-8601 with seconds and a ``Z``."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


class LedgerError(RuntimeError):
    """The file is not a ledger this benchgate can use; the message names it."""


_WHAT_TO_DO = (
    "give the path of the benchgate ledger, or a new path for a new ledger, "
    "and move this file away if it is in the way"
)


def _tables(conn: sqlite3.Connection) -> dict[str, set[str]]:
    """Every table of the database and its columns."""
    names = [
        row[0]
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    ]
    return {
        name: {row[1] for row in conn.execute(f'PRAGMA table_info("{name}")')} for name in names
    }


def _expected_tables(version: int) -> dict[str, set[str]]:
    """The tables (and columns) a ledger of schema ``version`` has."""
    conn = sqlite3.connect(":memory:")
    try:
        for script in MIGRATIONS[:version]:
            conn.executescript(script)
        tables = _tables(conn)
    finally:
        conn.close()
    tables["schema_version"] = {"version", "applied_at"}
    return tables


def check(path: str | Path, *, thorough: bool = False) -> int:
    """Check, reading only, that ``path`` is a ledger this benchgate can use.

    Return its schema version: 0 for a new ledger (no file, or an empty one).
    Raise :class:`LedgerError`, naming the file and what to do, for a file
    that is not SQLite, another program's database, a ledger whose tables do
    not match its schema version, or one newer than this benchgate.
    ``thorough`` also reads every page (``PRAGMA quick_check``) to find damage.
    """
    p = Path(path)
    if not p.exists():
        return 0
    if not p.is_file():
        raise LedgerError(f"the ledger {p} is not a file: {_WHAT_TO_DO}")
    try:
        conn = sqlite3.connect(f"{p.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise LedgerError(
            f"the ledger {p} cannot be opened ({exc}): check its permissions"
        ) from exc
    tables: dict[str, set[str]] = {}
    version = 0
    try:
        try:
            tables = _tables(conn)
            damage = conn.execute("PRAGMA quick_check(1)").fetchone()[0] if thorough else "ok"
            version = (
                int(
                    conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[
                        0
                    ]
                )
                if "schema_version" in tables
                else 0
            )
        except sqlite3.DatabaseError as exc:
            if "not a database" in str(exc):
                raise LedgerError(
                    f"the ledger {p} is not an SQLite database ({exc}): {_WHAT_TO_DO}"
                ) from exc
            damage = str(exc)
    finally:
        conn.close()
    if damage != "ok":
        raise LedgerError(
            f"the ledger {p} is damaged ({damage}): restore it from a backup, or save what "
            f"is left with `sqlite3 {p} .recover`; or {_WHAT_TO_DO}"
        )
    if not tables:
        return 0
    if "schema_version" not in tables:
        raise LedgerError(
            f"the ledger {p} is not a benchgate ledger: an SQLite database with the tables "
            f"{', '.join(sorted(tables))} and no schema_version; {_WHAT_TO_DO}"
        )
    if version > SCHEMA_VERSION:
        raise LedgerError(
            f"the ledger {p} has schema version {version}, newer than this benchgate "
            f"({SCHEMA_VERSION}): upgrade benchgate on the controller"
        )
    missing: list[str] = []
    for table, columns in sorted(_expected_tables(version).items()):
        if table not in tables:
            missing.append(table)
        else:
            missing.extend(f"{table}.{column}" for column in sorted(columns - tables[table]))
    if missing:
        raise LedgerError(
            f"the ledger {p} does not have the tables of schema version {version} "
            f"(missing: {', '.join(missing)}): {_WHAT_TO_DO}"
        )
    return version


def migrate(conn: sqlite3.Connection) -> int:
    """Apply missing migrations; return the schema version now in force.

    Runs in one ``BEGIN IMMEDIATE`` transaction, so two controllers opening a
    new ledger at once cannot both apply the same migration, and a failure
    leaves the file as it was. ``conn`` must be in autocommit mode
    (``isolation_level=None``), as :func:`connect` makes it.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version "
            "(version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)"
        )
        row = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()
        current = int(row[0])
        if current > SCHEMA_VERSION:
            raise LedgerError(
                f"ledger schema version {current} is newer than this benchgate "
                f"({SCHEMA_VERSION}); upgrade benchgate on the controller"
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[version - 1].split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_version (version, applied_at) VALUES (?, ?)",
                (version, utcnow()),
            )
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return SCHEMA_VERSION


def connect(path: str | Path) -> sqlite3.Connection:
    """Open (creating parent folders and the file) and migrate a ledger.

    An existing file is checked first (:func:`check`): a file that is not a
    ledger this benchgate can use raises :class:`LedgerError` and is not
    written to. A new file is created mode 0600, its new parent folders 0700.
    """
    p = Path(path)
    if str(p) != ":memory:":
        check(p)
        if not p.parent.is_dir():
            p.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # O_CREAT with 0600: SQLite would create it 0644 (less the umask).
        os.close(os.open(p, os.O_RDWR | os.O_CREAT, 0o600))
    conn = sqlite3.connect(str(p), isolation_level=None)
    try:
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA busy_timeout = 10000")
        migrate(conn)
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise LedgerError(f"the ledger {p} cannot be used ({exc}): {_WHAT_TO_DO}") from exc
    except BaseException:
        conn.close()
        raise
    return conn


@contextmanager
def _open(db: DbLike) -> Iterator[sqlite3.Connection]:
    if isinstance(db, sqlite3.Connection):
        yield db
        return
    conn = connect(db)
    try:
        yield conn
    finally:
        conn.close()


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """All statements inside commit together or not at all."""
    if conn.in_transaction:  # the caller's transaction: theirs to commit
        yield conn
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


# --------------------------------------------------------------------------
# Reading what a result says about itself (benchgate.result/1, tolerant)
# --------------------------------------------------------------------------


def _first(result: Mapping[str, Any], *paths: str) -> Any:
    """First non-empty value among dotted ``paths`` in ``result``."""
    for path in paths:
        node: Any = result
        for part in path.split("."):
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            else:
                node = None
                break
        if node not in (None, "", {}, []):
            return node
    return None


def result_metadata(result: Mapping[str, Any]) -> dict[str, Any]:
    """Host, model, release, hardware, unit hash and workload read from a result."""
    workload = result.get("workload")
    workload_name = _first(result, "workload.name", "workload_name")
    if workload_name is None and isinstance(workload, str):
        workload_name = workload
    return {
        "host": _first(result, "host", "target.host", "server.host"),
        "model": _first(result, "model", "server.model", "target.model", "workload.model"),
        "release": _first(
            result,
            "vllm_version",
            "release",
            "server.vllm_version",
            "server.version",
            "target.vllm_version",
            "target.server_version",
        ),
        "hardware": _first(result, "hardware", "server.hardware", "target.hardware"),
        "unit_hash": _first(result, "unit_hash", "config_hash", "server.unit_hash"),
        "workload_name": workload_name,
        "workload_hash": _first(result, "workload.hash", "workload.sha256", "workload_hash"),
        "started_at": _first(result, "started_at", "created_at"),
        "finished_at": _first(result, "finished_at", "end_time"),
        "schema": _first(result, "schema"),
    }


def _summary(result: Mapping[str, Any]) -> Any:
    return _first(result, "summary", "aggregate")


def _trial_rows(result: Mapping[str, Any]) -> list[tuple[int, bool, Any, str | None]]:
    trials = result.get("trials")
    if not isinstance(trials, list):
        return []
    rows = []
    for i, trial in enumerate(trials):
        if not isinstance(trial, Mapping):
            continue
        valid = trial.get("valid")
        if valid is None:
            valid = not trial.get("error") and not trial.get("errors")
        idx = trial.get("index", i)
        stage = trial.get("stage")
        rows.append(
            (
                int(idx) if isinstance(idx, int) else i,
                valid is True,
                trial.get("metrics"),
                stage if isinstance(stage, str) else None,
            )
        )
    return rows


# --------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------


def record_result(
    db: DbLike,
    result: Mapping[str, Any],
    *,
    host: str | None = None,
    phase: str,
    release: str | None = None,
    model: str | None = None,
    hardware: Any = None,
    unit_hash: str | None = None,
    workload_name: str | None = None,
    workload_hash: str | None = None,
    speculative: Mapping[str, Any] | None = None,
    recorded_at: str | None = None,
) -> int:
    """Store one benchmark result and its trials; return the run id.

    Explicit arguments win over what the result says about itself. ``phase``
    is the arm label: ``baseline``, ``candidate``, ``arm:ngram-k3``, ...
    ``speculative`` is the speculative config the server ran (``{}`` = off,
    ``None`` = not known).
    """
    meta = result_metadata(result)
    server_config = result.get("server_config")
    if not isinstance(server_config, Mapping):
        server_config = None
    host = host or meta["host"]
    if not host:
        raise ValueError("record_result needs a host (argument or 'host' in the result)")
    if not phase:
        raise ValueError("record_result needs a phase label, e.g. 'baseline' or 'candidate'")
    hw = hardware if hardware is not None else meta["hardware"]
    digest = hashlib.sha256(_dumps(result).encode()).hexdigest()
    summary = _summary(result)
    with _open(db) as conn, _transaction(conn):
        cur = conn.execute(
            "INSERT INTO runs (recorded_at, started_at, finished_at, host, phase, model, "
            "release, hardware_json, unit_hash, workload_name, workload_hash, schema, "
            "summary_json, result_sha256, speculative_json, stages_json, server_json) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                recorded_at or utcnow(),
                meta["started_at"],
                meta["finished_at"],
                host,
                phase,
                model or meta["model"],
                release or meta["release"],
                None if hw is None else _dumps(hw),
                unit_hash or meta["unit_hash"],
                workload_name or meta["workload_name"],
                workload_hash or meta["workload_hash"],
                meta["schema"],
                None if summary is None else _dumps(summary),
                digest,
                None if speculative is None else _dumps(dict(speculative)),
                None if not result.get("stages") else _dumps(result["stages"]),
                None if not server_config else _dumps(dict(server_config)),
            ),
        )
        run_id = int(cur.lastrowid or 0)
        seen: set[int] = set()
        for idx, valid, metrics, stage in _trial_rows(result):
            while idx in seen:  # duplicate indexes in a hand-made file: keep both
                idx += 1
            seen.add(idx)
            conn.execute(
                "INSERT INTO trials (run_id, idx, valid, metrics_json, stage) "
                "VALUES (?, ?, ?, ?, ?)",
                (run_id, idx, int(valid), _dumps(metrics if metrics is not None else {}), stage),
            )
    return run_id


def record_verdict(
    db: DbLike,
    verdict: Mapping[str, Any],
    *,
    host: str,
    release: str | None = None,
    baseline_release: str | None = None,
    phase: str | None = None,
    baseline_run_id: int | None = None,
    candidate_run_id: int | None = None,
    recorded_at: str | None = None,
) -> int:
    """Store one verdict (``Verdict.to_dict()`` or the same shape); return its id."""
    name = str(verdict.get("verdict", "")).upper()
    if name not in ("PASS", "FAIL", "INCONCLUSIVE"):
        raise ValueError(f"verdict must be PASS, FAIL or INCONCLUSIVE, got {name!r}")
    if not host:
        raise ValueError("record_verdict needs a host")
    reasons = verdict.get("reasons") or []
    details = {k: v for k, v in verdict.items() if k not in ("verdict", "reasons")}
    with _open(db) as conn, _transaction(conn):
        cur = conn.execute(
            "INSERT INTO verdicts (recorded_at, host, release, baseline_release, phase, verdict, "
            "reasons_json, details_json, baseline_run_id, candidate_run_id) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                recorded_at or utcnow(),
                host,
                release,
                baseline_release,
                phase,
                name,
                _dumps(list(reasons)),
                _dumps(details),
                baseline_run_id,
                candidate_run_id,
            ),
        )
        return int(cur.lastrowid or 0)


HOST_EVENTS = ("lost",)


def record_host_event(
    db: DbLike,
    *,
    host: str,
    event: str,
    reason: str,
    run_name: str | None = None,
    release: str | None = None,
    recorded_at: str | None = None,
) -> int:
    """Store what happened to a host apart from a verdict (``lost``); return its id."""
    if event not in HOST_EVENTS:
        raise ValueError(f"event must be one of {', '.join(HOST_EVENTS)}, got {event!r}")
    if not host:
        raise ValueError("record_host_event needs a host")
    with _open(db) as conn, _transaction(conn):
        cur = conn.execute(
            "INSERT INTO host_events (recorded_at, host, run_name, release, event, reason) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (recorded_at or utcnow(), host, run_name, release, event, reason),
        )
        return int(cur.lastrowid or 0)


def host_events(db: DbLike, host: str | None = None) -> list[dict[str, Any]]:
    """Every host event (of ``host``), newest first."""
    sql = "SELECT * FROM host_events"
    args: tuple[str, ...] = ()
    if host:
        sql, args = sql + " WHERE host = ?", (host,)
    with _open(db) as conn:
        rows = conn.execute(sql + " ORDER BY recorded_at DESC, id DESC", args).fetchall()
    return [dict(row) for row in rows]


# --------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------


def server_configs(db: DbLike, run_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """run id -> the serving configuration recorded with it (runs without one are left out)."""
    ids = sorted({int(i) for i in run_ids})
    if not ids:
        return {}
    marks = ", ".join("?" for _ in ids)
    with _open(db) as conn:
        rows = conn.execute(
            f"SELECT id, server_json FROM runs WHERE id IN ({marks}) AND server_json IS NOT NULL",
            ids,
        ).fetchall()
    out = {}
    for row in rows:
        config = _loads(row["server_json"])
        if isinstance(config, dict):
            out[int(row["id"])] = config
    return out


@dataclass(frozen=True)
class RunRecord:
    id: int
    recorded_at: str
    host: str
    phase: str
    model: str | None
    release: str | None
    hardware: Any
    unit_hash: str | None
    workload_name: str | None
    workload_hash: str | None
    summary: Any
    trials: list[dict[str, Any]]
    speculative: dict[str, Any] | None = None
    # Staged results: the result's ``stages`` block; each trial dict then has "stage".
    stages: list[dict[str, Any]] | None = None
    # The result's server_config (benchgate.serverconfig); None: not known.
    server_config: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class VerdictRecord:
    id: int
    recorded_at: str
    host: str
    release: str | None
    baseline_release: str | None
    phase: str | None
    verdict: str
    reasons: list[str]
    details: dict[str, Any]
    baseline_run_id: int | None
    candidate_run_id: int | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _where(
    host: str | None, release: str | None, since: str | None, phase: str | None = None
) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    args: list[Any] = []
    for column, value in (("host", host), ("release", release), ("phase", phase)):
        if value is not None:
            clauses.append(f"{column} = ?")
            args.append(value)
    if since is not None:
        clauses.append("recorded_at >= ?")
        args.append(since.strip().replace(" ", "T"))
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", args


def _verdict_row(row: sqlite3.Row) -> VerdictRecord:
    return VerdictRecord(
        id=row["id"],
        recorded_at=row["recorded_at"],
        host=row["host"],
        release=row["release"],
        baseline_release=row["baseline_release"],
        phase=row["phase"],
        verdict=row["verdict"],
        reasons=_loads(row["reasons_json"]) or [],
        details=_loads(row["details_json"]) or {},
        baseline_run_id=row["baseline_run_id"],
        candidate_run_id=row["candidate_run_id"],
    )


def runs(
    db: DbLike,
    *,
    host: str | None = None,
    release: str | None = None,
    phase: str | None = None,
    since: str | None = None,
    limit: int | None = 50,
) -> list[RunRecord]:
    """Recorded runs, newest first, with their trials."""
    where, args = _where(host, release, since, phase)
    sql = f"SELECT * FROM runs{where} ORDER BY recorded_at DESC, id DESC"
    if limit is not None:
        sql += " LIMIT ?"
        args.append(int(limit))
    out: list[RunRecord] = []
    with _open(db) as conn:
        for row in conn.execute(sql, args).fetchall():
            trials = [
                {
                    "index": t["idx"],
                    "valid": bool(t["valid"]),
                    "metrics": _loads(t["metrics_json"]),
                    **({"stage": t["stage"]} if t["stage"] is not None else {}),
                }
                for t in conn.execute(
                    "SELECT idx, valid, metrics_json, stage FROM trials WHERE run_id = ? "
                    "ORDER BY idx",
                    (row["id"],),
                )
            ]
            out.append(
                RunRecord(
                    id=row["id"],
                    recorded_at=row["recorded_at"],
                    host=row["host"],
                    phase=row["phase"],
                    model=row["model"],
                    release=row["release"],
                    hardware=_loads(row["hardware_json"]),
                    unit_hash=row["unit_hash"],
                    workload_name=row["workload_name"],
                    workload_hash=row["workload_hash"],
                    summary=_loads(row["summary_json"]),
                    trials=trials,
                    speculative=_loads(row["speculative_json"]),
                    stages=_loads(row["stages_json"]),
                    server_config=_loads(row["server_json"]),
                )
            )
    return out


def history(
    db: DbLike,
    *,
    host: str | None = None,
    release: str | None = None,
    since: str | None = None,
    limit: int | None = 50,
) -> list[VerdictRecord]:
    """Verdicts, newest first, filtered by host, release and time (``since`` ISO-8601)."""
    where, args = _where(host, release, since)
    sql = f"SELECT * FROM verdicts{where} ORDER BY recorded_at DESC, id DESC"
    if limit is not None:
        sql += " LIMIT ?"
        args.append(int(limit))
    with _open(db) as conn:
        return [_verdict_row(r) for r in conn.execute(sql, args).fetchall()]


def latest_verdicts(db: DbLike, hosts: Sequence[str] | None = None) -> dict[str, VerdictRecord]:
    """The most recent verdict of every host (or of the given hosts)."""
    sql = (
        "SELECT v.* FROM verdicts v WHERE v.id = ("
        " SELECT w.id FROM verdicts w WHERE w.host = v.host"
        " ORDER BY w.recorded_at DESC, w.id DESC LIMIT 1)"
    )
    args: list[Any] = []
    if hosts is not None:
        sql += f" AND v.host IN ({', '.join('?' for _ in hosts)})"
        args.extend(hosts)
    sql += " ORDER BY v.host"
    with _open(db) as conn:
        return {r["host"]: _verdict_row(r) for r in conn.execute(sql, args).fetchall()}


def record_ab_choice(
    db: DbLike,
    choice: Mapping[str, Any],
    *,
    host: str,
    release: str | None = None,
    recorded_at: str | None = None,
) -> int:
    """Store one speculative A/B outcome (``ab.Choice.to_dict()``); return its id."""
    if not host:
        raise ValueError("record_ab_choice needs a host")
    with _open(db) as conn, _transaction(conn):
        cur = conn.execute(
            "INSERT INTO ab_choices (recorded_at, host, release, objective, winner, "
            "config_json, reason, arms_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                recorded_at or utcnow(),
                host,
                release,
                str(choice.get("objective", "")),
                choice.get("winner"),
                _dumps(choice.get("config") or {}),
                str(choice.get("reason", "")),
                _dumps(choice.get("arms") or []),
            ),
        )
        return int(cur.lastrowid or 0)


def ab_choices(
    db: DbLike, *, host: str | None = None, release: str | None = None, limit: int | None = 50
) -> list[dict[str, Any]]:
    """Recorded speculative A/B outcomes, newest first."""
    where, args = _where(host, release, None)
    sql = f"SELECT * FROM ab_choices{where} ORDER BY recorded_at DESC, id DESC"
    if limit is not None:
        sql += " LIMIT ?"
        args.append(int(limit))
    with _open(db) as conn:
        return [
            {
                "id": r["id"],
                "recorded_at": r["recorded_at"],
                "host": r["host"],
                "release": r["release"],
                "objective": r["objective"],
                "winner": r["winner"],
                "config": _loads(r["config_json"]),
                "reason": r["reason"],
                "arms": _loads(r["arms_json"]),
            }
            for r in conn.execute(sql, args).fetchall()
        ]
