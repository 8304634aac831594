"""What is kept: the workspace database (SQLite or PostgreSQL), the library, drafts, saved settings,
background jobs, the work queue, and symlink-safe file writes."""
