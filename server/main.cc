// performer-serve: the program of server/serve_main.h.
#include "server/serve_main.h"

int main(int argc, char** argv) { return performer::server::ServeMain(argc, argv); }
