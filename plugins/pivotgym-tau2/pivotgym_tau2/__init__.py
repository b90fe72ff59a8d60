"""τ²-bench's airline and retail domains as pivotgym envs: the agent follows the domain's written policy, talks
to a simulated user and calls tools that read and write the domain's database, served by the domain's MCP
server (the ``tau2-*-mcp-eval`` packages). See the plugin's README for what is and is not τ²-bench."""
