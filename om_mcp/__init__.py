"""om's memory as a Model Context Protocol server (docs/integrations.md, MCP).

``mount.py`` puts the endpoint in the API process (``/mcp``, streamable HTTP); ``http.py`` is that endpoint,
``server.py`` the MCP server and ``tools.py`` its tools; ``stdio.py`` bridges a desktop client that speaks
only stdio to a running server (``om mcp``). Everything but ``mount.py`` and ``commands.py`` needs the
``mcp`` extra (``pip install 'om[mcp]'``).
"""
