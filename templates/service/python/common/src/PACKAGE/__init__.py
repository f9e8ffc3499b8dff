"""__NAME__: the __SERVICE__ service, served over gRPC (see README.md)."""
