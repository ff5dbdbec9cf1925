"""Durable writes (fsio.py): a file replaced atomically survives a failed write unchanged and leaves no temp file,
a tree is fsync'd file by file and directory by directory, and a full disk is recognised however it is reported.
Each check has a negative control (a plain write, a missing fsync, an error that is not a full disk)."""
import errno
import os

import pytest

from agentrl_lib import fsio


def test_atomic_write_replaces_the_file_or_leaves_it_as_it_was(tmp_path, monkeypatch):
    path = tmp_path / "config.yaml"
    fsio.atomic_write_text(path, "old\n")
    fsio.atomic_write_text(path, "new\n")
    assert path.read_text() == "new\n" and sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]

    def full(fd):  # the disk fills while the new content is flushed
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        fsio.atomic_write_text(path, "half of a new config")
    assert path.read_text() == "new\n" and sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]
    # negative control: a plain write in place loses the old content to the failed write
    with pytest.raises(OSError), open(path, "w") as f:
        f.write("half of a new config")
        f.flush()
        os.fsync(f.fileno())
    assert path.read_text() != "new\n"


def test_fsync_tree_syncs_every_file_and_directory(tmp_path, monkeypatch):
    (tmp_path / "ckpt" / "policy").mkdir(parents=True)
    for rel in ("state.json", "optimizer.pt", "policy/model.safetensors"):
        (tmp_path / "ckpt" / rel).write_text(rel)
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd))[1])
    fsio.fsync_tree(tmp_path / "ckpt")
    want = {str(p) for p in (tmp_path / "ckpt").rglob("*")} | {str(tmp_path / "ckpt")}
    assert want <= set(synced)
    # negative control: directories are entries too; syncing the files alone leaves them out
    synced.clear()
    for p in (tmp_path / "ckpt").rglob("*"):
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
    assert not want <= set(synced)


def test_a_full_disk_is_recognised_however_it_is_reported():
    def raised_from(cause: BaseException) -> RuntimeError:
        try:
            try:
                raise cause
            except BaseException as e:
                raise RuntimeError("could not save the model") from e
        except RuntimeError as e:
            return e

    assert fsio.is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert fsio.is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert fsio.is_disk_full(raised_from(OSError(errno.ENOSPC, "full")))  # wrapped by a library
    assert fsio.is_disk_full(Exception("I/O error: No space left on device (os error 28)"))  # safetensors' text
    assert fsio.is_disk_full(RuntimeError("[enforce fail at inline_container.cc:783] . unexpected pos 64 vs 0"))
    # negative controls: other write errors are not a full disk
    assert not fsio.is_disk_full(OSError(errno.EACCES, "Permission denied"))
    assert not fsio.is_disk_full(raised_from(ValueError("bad value")))


def test_atomic_write_never_replaces_what_is_not_a_regular_file(tmp_path):
    """A device node (made like /dev/null: root only), a FIFO and a directory are refused and left as they were; a
    symlink is followed: its target is written and the link stays a link. Control: os.replace, what the write did
    before, turns the FIFO into a regular file."""
    import stat

    from agentrl_lib.fsio import NotARegularFile, atomic_write_text

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(NotARegularFile, match="is a FIFO"):
        atomic_write_text(fifo, "x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and not list(tmp_path.glob(".fifo.tmp-*"))
    with pytest.raises(NotARegularFile, match="is a directory"):
        atomic_write_text(tmp_path, "x")
    if os.geteuid() == 0:
        dev = tmp_path / "null"
        os.mknod(dev, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        with pytest.raises(NotARegularFile, match="is a character device"):
            atomic_write_text(dev, "x")
        assert stat.S_ISCHR(os.lstat(dev).st_mode)
    target, link = tmp_path / "target.json", tmp_path / "link.json"
    target.write_text("old")
    link.symlink_to(target)
    atomic_write_text(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    (tmp_path / "tmp").write_text("x")  # the control
    os.replace(tmp_path / "tmp", fifo)
    assert stat.S_ISREG(os.lstat(fifo).st_mode)


def test_shown_path_hides_the_machines_absolute_paths(tmp_path, monkeypatch):
    """What a chapter prints of a path: under the cache root `$AGENTRL_HOME/...`, under home `~/...`; control: a path
    elsewhere is shown as it is (the helper does not invent a prefix)."""
    from agentrl_lib.paths import shown_path

    monkeypatch.setenv("AGENTRL_HOME", str(tmp_path / "cache"))
    assert shown_path(tmp_path / "cache" / "games" / "g1") == "$AGENTRL_HOME/games/g1"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert shown_path(tmp_path / "home" / "x.json") == "~/x.json"
    assert shown_path("/opt/elsewhere/x") == "/opt/elsewhere/x"


# ------------------------------------------------------------------------------------------------ untrusted trees
def _deep_tree(root, depth=1200):
    """`depth` nested directories under root (made with relative mkdir/chdir, as an agent's shell loop makes them),
    a file at the bottom, and a directory without permissions beside it. Returns the bottom directory's path."""
    import os

    here = os.getcwd()
    os.makedirs(root)
    os.chdir(root)
    try:
        for _ in range(depth):
            os.mkdir("d")
            os.chdir("d")
        with open("bottom.txt", "w") as f:
            f.write("x")
        os.mkdir("locked")
        os.chmod("locked", 0)
        return os.getcwd()
    finally:
        os.chdir(here)


def test_walk_and_remove_a_1200_deep_tree_and_a_big_file(tmp_path):
    """An agent's tree (issue 52): 1,200 nested directories, a 5 MiB file and 30 small files. walk_tree returns the
    small files, names the directory past TREE_MAX_DEPTH and the big file (not read), and never raises; remove_tree
    removes all of it. Negative controls: the old walk (Path.rglob) and shutil.rmtree raise RecursionError on it."""
    import shutil

    tree = tmp_path / "work"
    _deep_tree(tree / "deep")
    (tree / "big.bin").write_bytes(b"\0" * (5 << 20))
    for i in range(30):
        (tree / f"f{i}.py").write_text(str(i))
    files, notes = fsio.walk_tree(tree)
    assert set(files) == {f"f{i}.py" for i in range(30)}
    assert "big.bin: larger than 4 MiB, not read" in notes
    assert any(n.startswith("deep/" + "d/" * (fsio.TREE_MAX_DEPTH - 2)) and "deeper than 64 levels" in n
               for n in notes), notes
    few, notes = fsio.walk_tree(tree, max_entries=10)
    assert len(few) <= 10 and notes[-1] == "more than 10 entries: the rest of the tree was not looked at"

    # negative controls: the recursive walk and rmtree of Python 3.11 fail on the same tree
    with pytest.raises(RecursionError):
        list(tree.rglob("*"))
    with pytest.raises(RecursionError):
        shutil.rmtree(tree, ignore_errors=True)  # ignore_errors covers OSError, not RecursionError
    assert tree.exists()

    assert fsio.remove_tree(tree) is True and not tree.exists()
    assert fsio.remove_tree(tree) is True  # nothing there: nothing to do


def test_remove_tree_falls_back_to_rm_when_rmtree_leaves_something(tmp_path, monkeypatch):
    """A tree shutil.rmtree cannot remove (planted: rmtree does nothing) is removed by `rm -rf`; the control: without
    the fallback the tree stays."""
    import shutil

    (tmp_path / "t" / "a").mkdir(parents=True)
    monkeypatch.setattr(shutil, "rmtree", lambda *a, **k: None)
    assert fsio.remove_tree(tmp_path / "t") and not (tmp_path / "t").exists()
    (tmp_path / "u").mkdir()
    shutil.rmtree(tmp_path / "u", ignore_errors=True)  # control: the planted rmtree alone leaves it
    assert (tmp_path / "u").exists()
