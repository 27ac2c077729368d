"""What is made of finished runs: `memloop report` (headline tables, the papers' tables and plots),
the papers' table layouts, `memloop compare` and `memloop nightly`.

Stands above `memloop.jobs.run` and `memloop.jobs.store` and may use both; `memloop.jobs.run` never imports it.
"""
