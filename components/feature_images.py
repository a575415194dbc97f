"""The images a user brings to the Features tab for an index: uploaded files, one uploaded zip, or a
server folder under the allowed roots. Small sets only; larger ones go to the sharded CLI job."""
from __future__ import annotations

import hashlib
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

from backend.core import presets as P
from backend.core import sessions
from backend.sae import features as FT
from backend.sae import visitor
from components.common import fail
from components.visitor import own_folder, session_of

MAX_TAB_IMAGES = 256  # an index built from the tab; larger sets go to the sharded command-line job
MAX_ZIP_BYTES = 512 * 2**20  # uncompressed, all images of one uploaded zip together


@dataclass
class Build:
    """Where an index built from the tab and its uploaded images go: the visitor's own session
    folder (`images` set), or, when the owner shares builds (WORKBENCH_SHARED_BUILDS=1), the
    organism's index file for everyone (`images` None: beside that file)."""
    org: object
    session: str
    images: Path | None

    def room(self, n_bytes: int) -> None:
        if self.images is not None:
            sessions.check_room(self.session, n_bytes, "the uploaded images")

    def index_file(self, src: "FT.ImageSource") -> Path:
        if self.images is None:
            return Path(self.org.index_out)
        names = [src.name(i) for i in range(len(src))]
        return visitor.index_file(self.images.parent / "index", self.org, names, src.digest())

    @property
    def note(self) -> str:
        return "" if self.images is None else " (your own index: only this session sees it)"

    def installed(self, source: str, out: Path) -> str:
        """The source that shows the new index (the visitor's own), within the quota."""
        if self.images is None:
            FT.refresh_index(self.org)  # the shared file: every visitor picks it up
            return source
        sessions.keep_within_quota(self.session, [out.parent], "the index")
        return visitor.session_source(visitor.base_of(source), out)


def own_build(org, request) -> Build:
    images = own_folder(request, "features", "images")
    return Build(org, session_of(request), images)


def own_labels(source: str, org, request) -> str:
    """The source under which a visitor's model labels are kept: a visitor's own index keeps them
    beside it already; the shared index gets a labels file in the visitor's folder (starting from
    the shared labels), so the owner's labels.json is never written by a visitor."""
    if visitor.is_session(source) or org.index_path is None:
        return source
    folder = own_folder(request, "features", "labels")
    if folder is None:  # shared builds: the labels beside the shared index, for everyone
        return source
    name = sessions.content_name([str(org.index_path)], 12) + "-labels.json"
    return visitor.session_source(source, org.index_path, folder / name)


def collect_images(org, files, folder: str, dest_root: Path | None = None, room=None) -> "FT.ImageSource":
    """The images to index from the tab: uploaded files (copied under `dest_root`, a visitor's own
    folder, else beside the index, which refers to them by name) or a server folder under the
    allowed roots. `room(n_bytes)` refuses a copy that would not fit (a visitor's quota)."""
    dest_root = Path(dest_root) if dest_root is not None else Path(org.index_out).parent
    if files:
        paths = [Path(getattr(f, "name", f)) for f in (files if isinstance(files, list) else [files])]
        if any(p.suffix.lower() == ".zip" for p in paths):
            if len(paths) != 1:
                fail("Upload one zip of images, or the images themselves, not both.")
            return images_from_zip(org, paths[0], dest_root, room)
        if len(paths) > MAX_TAB_IMAGES:
            fail(f"At most {MAX_TAB_IMAGES} images from the tab; index larger sets with: {FT.index_command(org)}")
        h = hashlib.sha256()
        for p in paths:
            h.update(p.read_bytes())
        dest = dest_root / f"images-{h.hexdigest()[:12]}"
        if room is not None and not dest.is_dir():
            room(sum(p.stat().st_size for p in paths))
        dest.mkdir(parents=True, exist_ok=True)
        for i, p in enumerate(paths):
            if p.suffix.lower() not in FT.IMAGE_SUFFIXES:
                fail(f"{p.name} is not an image ({', '.join(FT.IMAGE_SUFFIXES)}).")
            shutil.copyfile(p, dest / f"{i:04d}_{p.name}")
        return FT.ImageSource.folder(dest)
    if folder and folder.strip():
        src = FT.ImageSource.folder(P.validate_local_path(folder.strip()))
        if len(src) > MAX_TAB_IMAGES:
            fail(f"{len(src)} images: at most {MAX_TAB_IMAGES} from the tab; for this folder run: "
                 f"{FT.index_command(org, folder.strip())}")
        return src
    fail("Upload some images or name a folder to index.")


def images_from_zip(org, path: Path, dest_root: Path, room=None) -> "FT.ImageSource":
    """The images of an uploaded zip, unpacked under `dest_root` (the index refers to them by name):
    image files only, at any depth, by their base names (so no entry can point outside the folder),
    up to MAX_TAB_IMAGES and MAX_ZIP_BYTES uncompressed, as the zip's directory states them."""
    try:
        with zipfile.ZipFile(path) as z:
            entries = [i for i in z.infolist() if not i.is_dir()
                       and Path(i.filename).suffix.lower() in FT.IMAGE_SUFFIXES
                       and not Path(i.filename).name.startswith(".")]
            if not entries:
                fail(f"{path.name} holds no images ({', '.join(FT.IMAGE_SUFFIXES)}).")
            if len(entries) > MAX_TAB_IMAGES:
                fail(f"{path.name} holds {len(entries)} images: at most {MAX_TAB_IMAGES} from the tab; unpack it "
                     f"and run: {FT.index_command(org)}")
            if sum(i.file_size for i in entries) > MAX_ZIP_BYTES:
                fail(f"{path.name} unpacks to more than {MAX_ZIP_BYTES // 2**20} MiB of images.")
            dest = dest_root / f"images-{hashlib.sha256(path.read_bytes()).hexdigest()[:12]}"
            if room is not None and not dest.is_dir():
                room(sum(i.file_size for i in entries))
            dest.mkdir(parents=True, exist_ok=True)
            for n, info in enumerate(sorted(entries, key=lambda i: i.filename)):
                (dest / f"{n:04d}_{Path(info.filename).name}").write_bytes(z.read(info))
    except zipfile.BadZipFile:
        fail(f"{path.name} is not a readable zip file.")
    return FT.ImageSource.folder(dest)
