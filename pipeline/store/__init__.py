"""The MongoDB adapter: the client, commits with their fences, ledgers, reads by id, the name store."""
