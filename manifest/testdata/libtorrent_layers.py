"""Reference oracle for stampede's manifest tests: BEP 52 piece layers from libtorrent.

Usage: /usr/bin/python3 libtorrent_layers.py --piece-size N FILE [FILE...]

For each non-empty FILE, builds a v2-only single-file torrent with piece
length N and prints one line:

    <hex pieces root> <file size> <piece length used> <hex piece layer>

where the piece layer is the concatenation of the file's entry in the
torrent's "piece layers" dictionary, or "-" when the file has none (BEP 52
gives no piece layer to a file of at most one piece).

Exit status: 0 ok, 1 failure, 2 libtorrent cannot be imported.
"""
import argparse
import os
import sys

try:
    import libtorrent as lt
except ImportError as e:
    sys.stderr.write("libtorrent_layers.py: cannot import libtorrent (%s); install python3-libtorrent\n" % e)
    sys.exit(2)


def layer_of(path, piece_size):
    size = os.path.getsize(path)
    if size == 0:
        raise RuntimeError("empty file has no piece layer")
    fs = lt.file_storage()
    name = os.path.basename(path)
    fs.add_file(name, size)
    t = lt.create_torrent(fs, piece_size, flags=lt.create_torrent.v2_only)
    lt.set_piece_hashes(t, os.path.dirname(os.path.abspath(path)))
    g = t.generate()
    root = lt.torrent_info(g).files().root(0)
    layers = g.get(b"piece layers", {})
    layer = layers.get(root.to_bytes())
    return str(root), size, t.piece_length(), layer.hex() if layer else "-"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--piece-size", type=int, required=True, help="piece length in bytes")
    p.add_argument("files", nargs="+", metavar="FILE")
    args = p.parse_args()
    for path in args.files:
        try:
            print(*layer_of(path, args.piece_size))
        except (OSError, RuntimeError) as e:
            sys.stderr.write("libtorrent_layers.py: %s: %s\n" % (path, e))
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
