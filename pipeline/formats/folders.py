"""``folder_shards``: the shard files of a dataset folder (a ``datasets`` ``save_to_disk``
folder or an MDS folder), in the order the folder lists them."""

from __future__ import annotations

from pathlib import Path

from pipeline.formats.arrow import DATASET_DICT_FILE, STATE_FILE, save_to_disk_files
from pipeline.formats.mds import INDEX_FILE, mds_folder_files


def folder_shards(folder: Path) -> list[Path] | None:
    """The shard files ``folder`` lists (each one shard), or None if it is a plain folder.

    A ``save_to_disk`` folder (``state.json``) gives its ``.arrow`` data files, an MDS
    folder (``index.json``) its shard files; a ``DatasetDict`` folder is a ``ConfigError``
    asking for one split's folder. Only the folder's own listing is read, and its files
    are stat-ed.
    """
    if (folder / STATE_FILE).is_file() or (folder / DATASET_DICT_FILE).is_file():
        return save_to_disk_files(folder)
    if (folder / INDEX_FILE).is_file():
        return mds_folder_files(folder)
    return None
