"""{{name}}: the {{service}} service, served over gRPC (see README.md)."""
