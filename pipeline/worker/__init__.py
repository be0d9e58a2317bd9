"""The Faust worker: agents that aggregate, a flusher that writes then acks."""
