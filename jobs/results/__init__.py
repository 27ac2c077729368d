"""What is made of finished runs: `memloop report` (headline tables, the papers' tables and plots),
the papers' table layouts, `memloop compare` and `memloop nightly`.

Stands above `jobs.run` and `jobs.store` and may use both; `jobs.run` never imports it.
"""
