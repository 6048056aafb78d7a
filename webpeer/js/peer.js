// peer.js: being written
