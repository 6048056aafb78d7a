// sw.js: being written
