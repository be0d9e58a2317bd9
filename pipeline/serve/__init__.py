"""`preagg serve`: the read-only query API, its OpenAPI document and the dashboard over HTTP."""
