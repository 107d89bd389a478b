//! One checkpoint, whatever its format: canonical tensor entries, config and data access.
