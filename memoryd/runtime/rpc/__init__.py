"""The socket's method surface (SPEC §11): one module per method family, one convention.

Layout:

- ``table.py``: :class:`~.table.MethodTable`, the name → handler table the server calls;
- ``context.py``: :class:`~.context.DaemonContext`, what handlers see of the daemon;
- ``prologue.py``: the validate-workspace → order slot → actor sequence;
- ``registry.py``: :func:`~.registry.build_methods`, every family in one table;
- the families: ``daemon`` (daemon.*), ``memory`` (memory.*), ``index`` (index.*),
  ``sessions`` (session.*), ``hooks`` (session.ingest, hook.run), ``dream`` (dream.*),
  ``agents`` (agents.*), ``confluence`` (confluence.*), ``secrets`` (secrets.*).

The convention, for a new method:

1. It goes in the module of its family (a new family is a new module, added to
   ``FAMILIES`` in ``registry.py``). Each family module has one entry point,
   ``register(table: MethodTable, ctx: DaemonContext) -> None``, which defines the
   handlers as closures decorated with ``@table.method("family.name")``. Something a
   handler needs from the daemon is a field of :class:`~.context.DaemonContext`.
2. A handler takes ``params: dict[str, Any]`` and validates every parameter first with
   :mod:`memoryd.core.params` (``p.known_only`` first; errors name the parameter), with no
   ``await`` before its prologue.
3. A method on a workspace then runs its call in the workspace's order with
   ``async with workspace_actor(ctx.supervisor, params, READ | WRITE) as actor:`` (a
   method on an open session: ``session_actor(ctx.supervisor, session_id)``; a workspace
   path that is not the ``workspace`` parameter: ``ordered_actor``), returning from inside
   the block. ``WRITE`` for anything that changes memory, ``READ`` otherwise.
   A call that must run outside its order slot takes its actor with
   :func:`~.prologue.session_actor_outside_order` (or leaves the block first) and carries
   a comment saying why.
4. Errors are raised from :mod:`memoryd.errors`; the server turns them into the one error
   shape. The result is JSON-able; the README's protocol section lists every registered
   method (``tests/test_docs.py`` checks).
"""
