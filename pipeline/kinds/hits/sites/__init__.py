"""Sites of the hits kind: what is kept per site and for how long.

* :mod:`.store`: the ``hits_sites`` documents (time-zone history, retention overrides)
  and the recorded retention cutoffs;
* :mod:`.cache`: a worker's copy of them, re-read every few seconds;
* :mod:`.tiers`: retention tiers and what a run prunes (pure);
* :mod:`.prune`: the statements a retention run sends;
* :mod:`.schedule`: which worker runs retention, once per interval for the group;
* :mod:`.commands`: ``preagg sites`` and ``preagg retention``.

Which site a log line belongs to is :mod:`pipeline.kinds.hits.site_map`.
"""
