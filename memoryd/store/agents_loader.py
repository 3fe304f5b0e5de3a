"""Discovery and reading of agent definitions, roles and personas (the I/O half of SPEC §9).

Where things are found, first found wins:

- **Definitions** (``*.md``, by the ``name`` in their front matter): the project's
  ``.grok/agents/`` in every directory from the workspace up to the git root (the directory
  holding ``.git``; nearest first; without a git root only the workspace itself), then
  ``<user_dir>/agents/`` (``~/.grok/agents``), then the definitions bundled in
  ``memoryd/bundled/agents/``.
- **Roles** / **personas** (by file stem or table name): ``.grok/roles/<name>.toml`` /
  ``.grok/personas/<name>.toml`` in the same project walk, then under ``<user_dir>``, then
  the config tables ``[agents.roles.<name>]`` / ``[agents.personas.<name>]``.

A role's ``prompt_file`` and a persona's ``instructions_file`` are read at resolve time. A
relative path is relative to the file that names it (for config tables: the config
directory, else the user dir). Every such path must stay inside the project root, the user
dir or the config directory after following symlinks; otherwise it is an
:class:`~memoryd.errors.AgentConfigError`.

:func:`resolve` and :func:`list_agents` are what the socket handler and the CLI call.
"""

from __future__ import annotations

import errno
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Literal

from memoryd.core.agents.definitions import AgentDefinition, fail, is_valid_name, parse_definition
from memoryd.core.agents.resolve import (
    EffectiveRuntimeConfig,
    FileContent,
    FileText,
    FileUnreadable,
    Overrides,
    resolve_effective_overrides,
)
from memoryd.core.agents.roles import Persona, Role, persona_from_mapping, role_from_mapping
from memoryd.core.replies import (
    AgentsListReply,
    AgentsResolveReply,
    ResolvedDefinition,
    TableEntryView,
)
from memoryd.errors import AgentConfigError, InvalidParams, NotFound, WorkspaceNotFound
from memoryd.store.files import read_regular

DefinitionOrigin = Literal["project", "user", "bundled"]
TableOrigin = Literal["project", "user", "config"]
CONFIG_KEYS: tuple[str, ...] = ("models", "roles", "personas")
IGNORED_CONFIG_KEYS: tuple[str, ...] = ("user_dir",)  # passed to resolve() as a Path
#: The largest definition, role, persona or prompt file read.
MAX_FILE_BYTES = 1024 * 1024


def default_user_dir() -> Path:
    """The user's agent config directory, ``~/.grok``."""
    return Path.home() / ".grok"


def bundled_agents_dir() -> Traversable:
    """The definitions shipped inside the package."""
    return files("memoryd").joinpath("bundled", "agents")


@dataclass(frozen=True)
class Project:
    """The project root (git root, or the workspace) and the walk, nearest first."""

    root: Path
    dirs: tuple[Path, ...]


def find_project(workspace: Path) -> Project:
    """Walk up from ``workspace`` to the directory holding ``.git``."""
    start = workspace.expanduser().resolve()
    if not start.is_dir():
        raise WorkspaceNotFound(f"workspace is not a directory: {workspace}", path=str(workspace))
    walked: list[Path] = []
    for directory in (start, *start.parents):
        walked.append(directory)
        if (directory / ".git").exists():
            return Project(root=directory, dirs=tuple(walked))
    return Project(root=start, dirs=(start,))


@dataclass(frozen=True)
class AgentEntry:
    """One listed definition and where it came from."""

    name: str
    description: str
    origin: DefinitionOrigin
    path: str


@dataclass(frozen=True)
class TableEntry:
    """One listed role or persona and where it came from (``path`` is None for config)."""

    name: str
    description: str | None
    origin: TableOrigin
    path: str | None


@dataclass(frozen=True)
class ConfigProblem:
    """A malformed file or table: listed, never hiding the others."""

    file: str
    field: str | None
    message: str

    @classmethod
    def of(cls, exc: AgentConfigError) -> ConfigProblem:
        return cls(
            file=str(exc.data.get("file", "?")), field=exc.data.get("field"), message=str(exc)
        )


@dataclass(frozen=True)
class AgentListing:
    """Everything discovered for a workspace, winners only, plus every problem found."""

    agents: tuple[AgentEntry, ...]
    roles: tuple[TableEntry, ...]
    personas: tuple[TableEntry, ...]
    errors: tuple[ConfigProblem, ...]

    def to_dict(self) -> AgentsListReply:
        """JSON-ready view for ``agents.list``."""
        return {
            "agents": [
                {"name": e.name, "description": e.description, "origin": e.origin, "path": e.path}
                for e in self.agents
            ],
            "roles": [_table_entry(entry) for entry in self.roles],
            "personas": [_table_entry(entry) for entry in self.personas],
            "errors": [
                {"file": p.file, "field": p.field, "message": p.message} for p in self.errors
            ],
        }


@dataclass(frozen=True)
class Resolution:
    """The effective config plus which definition was used and where it came from."""

    config: EffectiveRuntimeConfig
    definition: AgentDefinition | None
    origin: DefinitionOrigin | None
    path: str | None

    def to_dict(self) -> AgentsResolveReply:
        """``agents.resolve`` answer: the SPEC §9 fields plus ``definition``."""
        definition: ResolvedDefinition | None = None
        if self.definition is not None:
            definition = {**self.definition.to_dict(), "origin": self.origin, "path": self.path}
        return {**self.config.to_dict(), "definition": definition}


def _table_entry(entry: TableEntry) -> TableEntryView:
    return {
        "name": entry.name,
        "description": entry.description,
        "origin": entry.origin,
        "path": entry.path,
    }


# -- definitions -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Candidate:
    name: str
    origin: DefinitionOrigin
    path: str
    definition: AgentDefinition | None
    error: AgentConfigError | None


def _definition_dirs(
    project: Project, user_dir: Path, bundled: Traversable
) -> Iterator[tuple[DefinitionOrigin, Traversable]]:
    for directory in project.dirs:
        yield "project", directory / ".grok" / "agents"
    yield "user", user_dir / "agents"
    yield "bundled", bundled


def _scan_definitions(project: Project, user_dir: Path, bundled: Traversable) -> list[_Candidate]:
    """Every definition file in precedence order, parsed or with its error."""
    found: list[_Candidate] = []
    seen_dirs: set[str] = set()
    for origin, directory in _definition_dirs(project, user_dir, bundled):
        key = str(Path(str(directory)).resolve()) if isinstance(directory, Path) else str(directory)
        if key in seen_dirs or not directory.is_dir():
            continue
        seen_dirs.add(key)
        names_here: dict[str, str] = {}
        for entry in sorted(directory.iterdir(), key=lambda e: e.name):
            if not entry.name.endswith(".md") or not entry.is_file():
                continue
            path = str(entry)
            try:
                text = (
                    _file_text(entry)
                    if isinstance(entry, Path)
                    else entry.read_text(encoding="utf-8")  # bundled with the package
                )
                definition = parse_definition(text, path)
            except AgentConfigError as exc:
                hint = exc.data.get("agent") or entry.name.removesuffix(".md")
                found.append(_Candidate(str(hint), origin, path, None, exc))
                continue
            except (OSError, UnicodeDecodeError) as exc:
                error = AgentConfigError(
                    f"{path}: field 'file': cannot read: {exc}", file=path, field="file"
                )
                found.append(_Candidate(entry.name.removesuffix(".md"), origin, path, None, error))
                continue
            if definition.name in names_here:
                error = AgentConfigError(
                    f"{path}: field 'name': duplicate name {definition.name!r} "
                    f"(also in {names_here[definition.name]})",
                    file=path,
                    field="name",
                )
                found.append(_Candidate("", origin, path, None, error))
                continue
            names_here[definition.name] = path
            found.append(_Candidate(definition.name, origin, path, definition, None))
    return found


# -- roles and personas ------------------------------------------------------------------


@dataclass(frozen=True)
class _ConfigTables:
    models: dict[str, str]
    roles: dict[str, Any]
    personas: dict[str, Any]

    @classmethod
    def parse(cls, raw: object) -> _ConfigTables:
        """Accept the raw ``[agents]`` table or an object with these attributes."""
        if raw is None:
            raw = {}
        elif not isinstance(raw, Mapping):
            raw = {key: getattr(raw, key, None) for key in CONFIG_KEYS}
        for key in raw:
            if key not in CONFIG_KEYS and key not in IGNORED_CONFIG_KEYS:
                fail("config", f"agents.{key}", f"unknown key (known: {', '.join(CONFIG_KEYS)})")
        tables: dict[str, dict[str, Any]] = {}
        for key in CONFIG_KEYS:
            value = raw.get(key) or {}
            if not isinstance(value, Mapping):
                fail("config", f"agents.{key}", "must be a table")
            tables[key] = dict(value)
        for agent, model in tables["models"].items():
            if not isinstance(model, str) or not model.strip():
                fail("config", f"agents.models.{agent}", f"must be a model id (got {model!r})")
        return cls(models=tables["models"], roles=tables["roles"], personas=tables["personas"])


TableName = Literal["roles", "personas"]


@dataclass(frozen=True)
class _TableSource:
    """Where one role or persona is declared: a ``.toml`` file, or a config table."""

    table: TableName
    name: str
    origin: TableOrigin
    path: Path | None
    raw: object = None

    def load(self, config_base: Path) -> Role | Persona:
        """Read (if a file) and validate; errors name the file or config table and field."""
        if self.path is None:
            label, raw, base = f"config [agents.{self.table}.{self.name}]", self.raw, config_base
        else:
            label, base = str(self.path), self.path.parent
            try:
                raw = tomllib.loads(_file_text(self.path))
            except tomllib.TOMLDecodeError as exc:
                fail(label, "toml", f"invalid TOML: {exc}")
            except (OSError, UnicodeDecodeError) as exc:
                fail(label, "file", f"cannot read: {exc}")
        if self.table == "roles":
            return role_from_mapping(self.name, raw, label, base_dir=str(base))
        return persona_from_mapping(self.name, raw, label, base_dir=str(base))

    def entry(self, value: Role | Persona) -> TableEntry:
        description = value.description if isinstance(value, Role) else None
        path = None if self.path is None else str(self.path)
        return TableEntry(self.name, description, self.origin, path)


@dataclass(frozen=True)
class _Places:
    """Everything discovery looks at for one workspace."""

    project: Project
    user_dir: Path
    config_dir: Path | None
    bundled: Traversable
    tables: _ConfigTables

    @property
    def config_base(self) -> Path:
        """What a relative path in a config table is relative to."""
        return self.config_dir if self.config_dir is not None else self.user_dir

    @property
    def roots(self) -> tuple[Path, ...]:
        """Directories a referenced file must stay inside."""
        dirs = (self.project.root, self.user_dir, self.config_dir)
        return tuple(d.expanduser().resolve() for d in dirs if d is not None)

    def table_sources(self, table: TableName) -> Iterator[_TableSource]:
        """Every declaration of a role/persona, in precedence order."""
        seen: set[Path] = set()
        dirs: list[tuple[TableOrigin, Path]] = [
            ("project", d / ".grok" / table) for d in self.project.dirs
        ]
        dirs.append(("user", self.user_dir / table))
        for origin, directory in dirs:
            real = directory.resolve()
            if real in seen or not directory.is_dir():
                continue
            seen.add(real)
            for path in sorted(directory.glob("*.toml")):
                if path.is_file():
                    yield _TableSource(table, path.stem, origin, path)
        declared = self.tables.roles if table == "roles" else self.tables.personas
        for name, raw in declared.items():
            yield _TableSource(table, name, "config", None, raw)

    def find(self, table: TableName, name: str) -> Role | Persona | None:
        """The first role/persona called ``name``; a malformed match is raised."""
        source = next((s for s in self.table_sources(table) if s.name == name), None)
        return source.load(self.config_base) if source is not None else None

    def list(self, table: TableName, errors: list[ConfigProblem]) -> tuple[TableEntry, ...]:
        """Winners by name; every malformed declaration goes to ``errors``."""
        entries: dict[str, TableEntry] = {}
        for source in self.table_sources(table):
            try:
                value = source.load(self.config_base)
            except AgentConfigError as exc:
                errors.append(ConfigProblem.of(exc))
                continue
            entries.setdefault(source.name, source.entry(value))
        return tuple(sorted(entries.values(), key=lambda e: e.name))


def _places(
    workspace: Path,
    tables: _ConfigTables,
    user_dir: Path,
    bundled_dir: Traversable | None,
    config_dir: Path | None,
) -> _Places:
    return _Places(
        project=find_project(workspace),
        user_dir=user_dir,
        config_dir=config_dir,
        bundled=bundled_dir if bundled_dir is not None else bundled_agents_dir(),
        tables=tables,
    )


# -- referenced files --------------------------------------------------------------------


def _confined(
    raw: str, base_dir: str | None, roots: tuple[Path, ...], origin: str, field: str
) -> Path:
    """The real path of ``raw``, which must stay inside one of ``roots``."""
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = Path(base_dir or ".") / path
    try:
        real = path.resolve()
    except (OSError, RuntimeError) as exc:
        fail(origin, field, f"cannot resolve path {raw!r}: {exc}")
    if not any(real.is_relative_to(root) for root in roots):
        fail(
            origin,
            field,
            f"path {raw!r} escapes the project root and the user config directory",
            path=str(real),
        )
    return real


def _file_text(path: Path) -> str:
    """A definition, role, persona or prompt file (UTF-8): a regular file of at most
    :data:`MAX_FILE_BYTES` (a cloned repository's ``.grok/`` is anyone's input), else
    OSError; never a FIFO or device read."""
    read = read_regular(path, MAX_FILE_BYTES)
    if read.truncated:
        raise OSError(errno.EFBIG, f"larger than {MAX_FILE_BYTES} bytes", str(path))
    return read.data.decode("utf-8")


def _read(path: Path) -> FileContent:
    try:
        return FileText(str(path), _file_text(path))
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return FileUnreadable(str(path), reason)


# -- the two entry points ----------------------------------------------------------------


def resolve(
    workspace: Path,
    subagent_type: str,
    overrides: Overrides,
    config_agents: object,
    user_dir: Path,
    parent_model: str | None,
    *,
    bundled_dir: Traversable | None = None,
    config_dir: Path | None = None,
) -> Resolution:
    """Resolve the effective runtime config of a sub-agent of type ``subagent_type``.

    ``config_agents`` is the raw ``[agents]`` config table (``models`` pins by agent name,
    ``roles``, ``personas``; ``user_dir`` is ignored here) or an object with those
    attributes, or ``None``. A type with neither a definition nor a role is
    :class:`~memoryd.errors.NotFound`; a malformed file that would have answered is raised.
    """
    if not is_valid_name(subagent_type):
        raise InvalidParams(f"invalid sub-agent type: {subagent_type!r}", key="subagent_type")
    tables = _ConfigTables.parse(config_agents)
    places = _places(workspace, tables, user_dir, bundled_dir, config_dir)

    candidates = _scan_definitions(places.project, user_dir, places.bundled)
    chosen = next((c for c in candidates if c.name == subagent_type), None)
    if chosen is not None and chosen.error is not None:
        raise chosen.error
    role = places.find("roles", subagent_type)
    assert role is None or isinstance(role, Role)
    if chosen is None and role is None:
        known = sorted({c.name for c in candidates if c.definition is not None})
        raise NotFound(
            f"no agent definition or role named {subagent_type!r}",
            subagent_type=subagent_type,
            available=known,
        )
    persona = places.find("personas", overrides.persona) if overrides.persona else None
    assert persona is None or isinstance(persona, Persona)

    role_prompt = None
    if role is not None and role.prompt_file is not None:
        role_prompt = _read(
            _confined(role.prompt_file, role.base_dir, places.roots, role.origin, "prompt_file")
        )
    persona_file = None
    if persona is not None and persona.instructions_file is not None:
        where = _confined(
            persona.instructions_file,
            persona.base_dir,
            places.roots,
            persona.origin,
            "instructions_file",
        )
        persona_file = _read(where)

    definition = chosen.definition if chosen is not None else None
    config = resolve_effective_overrides(
        definition,
        role,
        persona,
        overrides,
        pinned_model=tables.models.get(subagent_type),
        parent_model=parent_model,
        role_prompt_file=role_prompt,
        persona_file=persona_file,
    )
    return Resolution(
        config=config,
        definition=definition,
        origin=chosen.origin if chosen is not None else None,
        path=chosen.path if chosen is not None else None,
    )


def list_agents(
    workspace: Path,
    config_agents: object,
    user_dir: Path,
    *,
    bundled_dir: Traversable | None = None,
    config_dir: Path | None = None,
) -> AgentListing:
    """Every definition, role and persona visible from ``workspace``, and every problem."""
    errors: list[ConfigProblem] = []
    try:
        tables = _ConfigTables.parse(config_agents)
    except AgentConfigError as exc:
        errors.append(ConfigProblem.of(exc))
        tables = _ConfigTables(models={}, roles={}, personas={})
    places = _places(workspace, tables, user_dir, bundled_dir, config_dir)

    agents: dict[str, AgentEntry] = {}
    for candidate in _scan_definitions(places.project, user_dir, places.bundled):
        if candidate.error is not None:
            errors.append(ConfigProblem.of(candidate.error))
        elif candidate.definition is not None and candidate.name not in agents:
            agents[candidate.name] = AgentEntry(
                candidate.name,
                candidate.definition.description,
                candidate.origin,
                candidate.path,
            )
    roles = places.list("roles", errors)
    personas = places.list("personas", errors)
    return AgentListing(
        agents=tuple(sorted(agents.values(), key=lambda e: e.name)),
        roles=roles,
        personas=personas,
        errors=tuple(errors),
    )
