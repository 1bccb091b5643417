package idem

// Version is the client's version: idem's, the tag the module is released under
// (clients/versions_check.cmake keeps them equal). It is sent in User-Agent.
const Version = "0.1.0"
