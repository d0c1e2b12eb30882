"""On the bare servers' PYTHONPATH: `import sniffio` fails there as it does where `pip install mcp`
alone installed the SDK (nothing it needs pulls sniffio in; our service asks for it). Without it,
anyio finds asyncio with one `get_running_loop()` call instead of sniffio's lookups."""

raise ModuleNotFoundError("No module named 'sniffio' (bench/without_sniffio)", name="sniffio")
