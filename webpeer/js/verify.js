// verify.js: being written
