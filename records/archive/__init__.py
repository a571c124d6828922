"""An archive of records in one SQLite file (sqlite-utils), and re-scoring it.

One module per concern, their public names importable from here:

- `schema`: the tables, `open_archive`, `ArchiveError`;
- `add`: `add_files`, `add_envelopes`: records verified, then stored in chunks
  (`AddTask`/`check_task`, run by an executor);
- `query`: `Selection`, `query_records`, `iter_envelopes`, `find_record`;
- `rescoring`: `rescore` of a whole archive in shards (`Shard`/`run_shard`), continued when
  interrupted (one record's report is records/rescore.py's `rescore_record`);
- `summary`: the counts of a run, `list_runs`, `run_results`.
"""

from tapis_cartes.records.archive.add import (
    ADD_CHUNK,
    AddReport,
    AddTask,
    add_envelopes,
    add_files,
    check_task,
)
from tapis_cartes.records.archive.query import Selection, find_record, iter_envelopes, query_records
from tapis_cartes.records.archive.rescoring import Shard, check_changes, rescore, run_shard
from tapis_cartes.records.archive.schema import ArchiveError, open_archive
from tapis_cartes.records.archive.summary import list_runs, run_results
from tapis_cartes.records.rescore import RescoreSummary, rescore_record

__all__ = [
    "ADD_CHUNK",
    "AddReport",
    "AddTask",
    "ArchiveError",
    "RescoreSummary",
    "Selection",
    "Shard",
    "add_envelopes",
    "add_files",
    "check_changes",
    "check_task",
    "find_record",
    "iter_envelopes",
    "list_runs",
    "open_archive",
    "query_records",
    "rescore",
    "rescore_record",
    "run_results",
    "run_shard",
]
