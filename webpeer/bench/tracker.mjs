// The WebTorrent baseline's tracker: npm bittorrent-tracker's WebSocket
// server (no WebRTC module: it only relays). Usage: node tracker.mjs HOST PORT
import Server from 'bittorrent-tracker/server';

const [host, port] = process.argv.slice(2);
const server = new Server({ udp: false, http: false, ws: true, stats: false });
server.on('error', (e) => { console.error('tracker:', e.message); process.exit(1); });
server.listen(Number(port), host, () => console.log('listening'));
