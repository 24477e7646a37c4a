// A minimal NORM file sender and receiver for the rmcast lab.
//
// Settings follow /work/shared/notes/peers.md: fixed rate (congestion control
// off), parity 0 (plain retransmission) unless the scenario asks for NORM's
// Reed-Solomon parity (`--parity N`: up to N parity packets per block of 64
// answer NACKs, `--auto-parity A`: A of them sent with every block
// proactively), socket buffers set AFTER the
// session starts (before that they do not take effect), positive
// acknowledgement (watermark) from every receiver so the sender knows when
// all hold the file, and the received file renamed by us (NormFileRename
// with a relative path made a directory).
#include <normApi.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <ctime>
#include <string>

static double now_s() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

// Waits up to `timeout_s` for the next event; false on timeout.
static bool next_event(NormInstanceHandle inst, NormEvent* ev, double timeout_s) {
  NormDescriptor fd = NormGetDescriptor(inst);
  fd_set set;
  FD_ZERO(&set);
  FD_SET(fd, &set);
  struct timeval tv;
  if (timeout_s < 0) timeout_s = 0;
  tv.tv_sec = (long)timeout_s;
  tv.tv_usec = (long)((timeout_s - (double)tv.tv_sec) * 1e6);
  int n = select(fd + 1, &set, nullptr, nullptr, &tv);
  if (n <= 0) return false;
  return NormGetNextEvent(inst, ev, true);
}

static const unsigned kSegment = 1400;  // fits a 1500-byte MTU with NORM's headers
static const unsigned kBlock = 64;      // source symbols per FEC block
static const unsigned kBuffer = 16u << 20;

extern "C" int rml_norm_send(const char* file, const char* addr, int port, const char* iface,
                             double rate_bps, const unsigned* ids, int n_ids, unsigned my_id,
                             double timeout_s, unsigned num_parity, unsigned auto_parity) {
  NormInstanceHandle inst = NormCreateInstance(false);
  NormSessionHandle s = NormCreateSession(inst, addr, (unsigned short)port, my_id);
  if (s == NORM_SESSION_INVALID) { fprintf(stderr, "norm-send: cannot create session\n"); return 2; }
  if (iface && *iface) NormSetMulticastInterface(s, iface);
  NormSetTTL(s, 1);
  NormSetCongestionControl(s, false);
  NormSetTxRate(s, rate_bps);
  NormSetGrttEstimate(s, 0.001);
  NormSetAutoParity(s, (unsigned char)(auto_parity < num_parity ? auto_parity : num_parity));
  NormSetBackoffFactor(s, 0.0);
  for (int i = 0; i < n_ids; i++) NormAddAckingNode(s, ids[i]);
  if (!NormStartSender(s, (NormSessionId)(now_s() * 1000), kBuffer, kSegment, kBlock,
                       (unsigned short)num_parity)) {
    fprintf(stderr, "norm-send: NormStartSender failed\n");
    return 2;
  }
  NormSetTxSocketBuffer(s, kBuffer);  // only effective after NormStartSender
  const char* base = strrchr(file, '/');
  base = base ? base + 1 : file;
  NormObjectHandle obj = NormFileEnqueue(s, file, base, (unsigned)strlen(base));
  if (obj == NORM_OBJECT_INVALID) { fprintf(stderr, "norm-send: cannot enqueue %s\n", file); return 2; }
  NormSetWatermark(s, obj, true);
  double deadline = now_s() + timeout_s;
  int rounds = 0;
  int rc = 1;
  while (now_s() < deadline) {
    NormEvent ev;
    if (!next_event(inst, &ev, deadline - now_s())) continue;
    if (ev.type == NORM_TX_WATERMARK_COMPLETED) {
      if (NormGetAckingStatus(s, NORM_NODE_ANY) == NORM_ACK_SUCCESS) { rc = 0; break; }
      if (++rounds > 20) { fprintf(stderr, "norm-send: receivers did not acknowledge after %d rounds\n", rounds); break; }
      NormSetWatermark(s, obj, true);  // ask again; not every receiver acknowledged yet
    }
  }
  if (rc != 0 && rounds <= 20) fprintf(stderr, "norm-send: timed out after %.0f s\n", timeout_s);
  NormStopSender(s);
  NormDestroySession(s);
  NormDestroyInstance(inst);
  return rc;
}

extern "C" int rml_norm_recv(const char* dir, const char* addr, int port, const char* iface,
                             unsigned my_id, double timeout_s, double linger_s) {
  NormInstanceHandle inst = NormCreateInstance(false);
  NormSetCacheDirectory(inst, dir);
  NormSessionHandle s = NormCreateSession(inst, addr, (unsigned short)port, my_id);
  if (s == NORM_SESSION_INVALID) { fprintf(stderr, "norm-recv: cannot create session\n"); return 2; }
  if (iface && *iface) NormSetMulticastInterface(s, iface);
  NormSetDefaultSyncPolicy(s, NORM_SYNC_ALL);
  if (!NormStartReceiver(s, kBuffer)) { fprintf(stderr, "norm-recv: NormStartReceiver failed\n"); return 2; }
  NormSetRxSocketBuffer(s, kBuffer);  // only effective after NormStartReceiver
  double deadline = now_s() + timeout_s;
  int rc = 1;
  while (now_s() < deadline) {
    NormEvent ev;
    if (!next_event(inst, &ev, deadline - now_s())) continue;
    if (ev.type == NORM_RX_OBJECT_COMPLETED && NormObjectGetType(ev.object) == NORM_OBJECT_FILE) {
      char path[4096];
      memset(path, 0, sizeof path);
      NormFileGetName(ev.object, path, sizeof path - 1);
      std::string dest = std::string(dir) + "/object";
      if (rename(path, dest.c_str()) != 0) { perror("norm-recv: rename"); rc = 2; break; }
      rc = 0;
      // Stay a moment so the watermark acknowledgement reaches the sender.
      deadline = now_s() + linger_s;
    } else if (ev.type == NORM_RX_OBJECT_ABORTED) {
      fprintf(stderr, "norm-recv: object aborted\n");
    }
  }
  if (rc == 1) fprintf(stderr, "norm-recv: no complete file within %.0f s\n", timeout_s);
  NormStopReceiver(s);
  NormDestroySession(s);
  NormDestroyInstance(inst);
  return rc;
}
