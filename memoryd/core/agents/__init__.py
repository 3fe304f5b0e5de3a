"""Sub-agent runtime configuration, the pure part (SPEC §9).

- :mod:`.definitions` — agent definitions (markdown + YAML front matter), parsed and checked.
- :mod:`.roles` — roles (by sub-agent type) and personas (by name), validated from mappings.
- :mod:`.resolve` — the per-field cascade, the definition fallback and the failure modes.

Discovery and file reading live in :mod:`memoryd.store.agents_loader`.
"""

from __future__ import annotations

from memoryd.core.agents.definitions import (
    AgentDefinition,
    CapabilityMode,
    Effort,
    Isolation,
    McpInheritance,
    parse_definition,
)
from memoryd.core.agents.resolve import (
    EffectiveRuntimeConfig,
    FileContent,
    FileText,
    FileUnreadable,
    Overrides,
    render_persona,
    resolve_effective_overrides,
)
from memoryd.core.agents.roles import Persona, Role, persona_from_mapping, role_from_mapping

__all__ = [
    "AgentDefinition",
    "CapabilityMode",
    "EffectiveRuntimeConfig",
    "Effort",
    "FileContent",
    "FileText",
    "FileUnreadable",
    "Isolation",
    "McpInheritance",
    "Overrides",
    "Persona",
    "Role",
    "parse_definition",
    "persona_from_mapping",
    "render_persona",
    "resolve_effective_overrides",
    "role_from_mapping",
]
