// A shared library that is not a probe plugin: it lacks undercurrent_register_probes
// (registry_test checks the error).
extern "C" int uc_not_a_probe_plugin() { return 42; }
