# Install rules (placeholder until they land).
