"""The platform's own tools, as agents reach them (over MCP, or from a run's harness).

``declarations.py`` says what each tool is (name, effect, argument schema, description);
each family's module builds its functions over the platform (``toolbox(platform)``), and
``toolbox.py`` gathers them. Every call comes through the gate (bot/actions/actions.py), which
knows nothing of what a tool does beyond its declared effect. A tool reads who asks from its
``Caller``, never from its arguments.
"""
