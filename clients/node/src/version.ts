// The client's version: idem's (clients/versions_check.cmake keeps them equal).
export const VERSION = "0.1.0";
