// Makes the WebTorrent baseline's torrent of FILE, with the origin's URL as
// its web seed (BEP 19) and the tracker's announce URL, and prints it as
// base64. Usage: node torrent.mjs FILE WEBSEED_URL ANNOUNCE_URL PIECE_LENGTH
import createTorrent from 'create-torrent';

const [file, webseed, announce, pieceLength] = process.argv.slice(2);
createTorrent(file, { urlList: [webseed], announceList: [[announce]], pieceLength: Number(pieceLength) }, (err, t) => {
  if (err) { console.error(err.message); process.exit(1); }
  process.stdout.write(Buffer.from(t).toString('base64'));
});
