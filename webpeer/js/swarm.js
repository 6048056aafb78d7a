// swarm.js: being written
