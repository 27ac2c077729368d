"""`memloop view`: a read-only browser over finished (or running) runs, and its static bundle.

The pages read a run through `memloop.jobs.store.run_store.RunStore` and lay out what `memloop.jobs.results.report` and
`memloop.jobs.results.compare` compute (the tables are the report's own Markdown, rendered); this package
only indexes units for the samples page, builds the memory timeline of one unit (`timeline`), and
serves (`app`) or writes (`bundle`) the pages. Every page is a Jinja2 template with autoescaping on:
model outputs, memories and book text are untrusted and always rendered as text.
"""
