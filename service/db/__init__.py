"""Storage: the engine, the session factory and the shared metadata."""
