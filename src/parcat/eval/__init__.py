"""``parcat eval``, ``plan`` and ``compare``: tasks to results, files of results, tournaments
and their statistics."""
