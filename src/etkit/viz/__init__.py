"""Pictures of a job: Perfetto timelines (:mod:`.timeline`), dependency graphs (:mod:`.graph`), and
the self-contained HTML report (:mod:`.report`) built from inline SVG charts (:mod:`.svg`)."""
