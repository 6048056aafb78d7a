"""Reference oracle for stampede's manifest tests: BEP 52 pieces roots from libtorrent.

Usage: /usr/bin/python3 libtorrent_root.py [--piece-size N] FILE [FILE...]

For each FILE, builds a v2-only single-file torrent with libtorrent and prints
one line: "<hex pieces root> <file size> <piece length used>".
--piece-size N is in bytes (0, the default, lets libtorrent choose).

A 0-byte file has no pieces root in BEP 52 and libtorrent refuses a torrent
whose only file is empty ("invalid length of torrent"), so an empty FILE is
put into a two-file torrent next to a 1-byte dummy and libtorrent's root for
the empty file is printed (libtorrent 2.0.8 reports all zeros).

Exit status: 0 ok, 1 failure, 2 libtorrent cannot be imported.
"""
import argparse
import os
import sys
import tempfile

try:
    import libtorrent as lt
except ImportError as e:
    sys.stderr.write("libtorrent_root.py: cannot import libtorrent (%s); install python3-libtorrent\n" % e)
    sys.exit(2)


def root_of(fs, parent, want, piece_size):
    """Hash the files of fs found under parent; return (root of path want, piece length)."""
    t = lt.create_torrent(fs, piece_size, flags=lt.create_torrent.v2_only)
    lt.set_piece_hashes(t, parent)
    files = lt.torrent_info(t.generate()).files()
    for i in range(files.num_files()):
        if files.file_path(i) == want:
            return str(files.root(i)), t.piece_length()
    raise RuntimeError("file %r not found in generated torrent" % want)


def file_root(path, piece_size):
    size = os.path.getsize(path)
    if size > 0:
        fs = lt.file_storage()
        name = os.path.basename(path)
        fs.add_file(name, size)
        root, plen = root_of(fs, os.path.dirname(os.path.abspath(path)), name, piece_size)
        return root, size, plen
    # Empty file: libtorrent cannot make a torrent of it alone; add a dummy.
    with tempfile.TemporaryDirectory() as tmp:
        os.mkdir(os.path.join(tmp, "t"))
        open(os.path.join(tmp, "t", "empty"), "wb").close()
        with open(os.path.join(tmp, "t", "dummy"), "wb") as f:
            f.write(b"x")
        fs = lt.file_storage()
        fs.add_file(os.path.join("t", "empty"), 0)
        fs.add_file(os.path.join("t", "dummy"), 1)
        root, plen = root_of(fs, tmp, os.path.join("t", "empty"), piece_size)
        return root, 0, plen


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--piece-size", type=int, default=0, help="piece length in bytes (0 = libtorrent chooses)")
    p.add_argument("files", nargs="+", metavar="FILE")
    args = p.parse_args()
    for path in args.files:
        try:
            root, size, plen = file_root(path, args.piece_size)
        except (OSError, RuntimeError) as e:
            sys.stderr.write("libtorrent_root.py: %s: %s\n" % (path, e))
            return 1
        print(root, size, plen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
