/* roundtrip.c: the rmcast C library end to end, on this machine only.
 *
 * 1. Wrong arguments (NULL pointers, bad groups, zero receivers, a missing
 *    key file, no key at all, ...) each return the documented error code
 *    and a message in rmcast_last_error().
 * 2. A buffer of about 1 MiB goes to 4 receiver threads over loopback
 *    multicast (127.0.0.1, TTL 1, a random group), sealed under a fresh
 *    group key; every receiver's copy is compared byte for byte.
 * 3. A receive whose cancel token is raised (before, or from a SIGALRM
 *    handler while it waits) returns RMCAST_STATUS_CANCELLED.
 *
 * Exits 0 when every check passed, 1 otherwise; the last line says
 * "roundtrip: N passed, M failed".
 *
 * Build (see ../../ci.sh): cc -std=c11 -Wall -Wextra -I include \
 *   examples/c/roundtrip.c -L DIR -lrmcast_ffi -lpthread -Wl,-rpath,DIR
 */
#define _POSIX_C_SOURCE 200809L
#include "rmcast.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define RECEIVERS 4
#define SIZE ((size_t)(1u << 20) + 12345u)

static int passed, failed;

static void check(int ok, const char *what) {
  if (ok) {
    passed++;
  } else {
    failed++;
    fprintf(stderr, "FAILED: %s\n", what);
  }
}

/* A call that must fail with `want` and leave a message. */
static void expect(RmcastStatus got, RmcastStatus want, const char *what) {
  const char *msg = rmcast_last_error();
  int ok = got == want && msg != NULL && msg[0] != '\0';
  if (ok) {
    printf("ok: %s -> %s: %s\n", what, rmcast_status_name(got), msg);
  } else {
    fprintf(stderr, "%s: got %s (%s), wanted %s with a message\n", what,
            rmcast_status_name(got), msg ? msg : "(null)", rmcast_status_name(want));
  }
  check(ok, what);
}

/* A call that must succeed. */
static void must(RmcastStatus st, const char *what) {
  if (st != RMCAST_STATUS_OK) {
    fprintf(stderr, "%s: %s: %s\n", what, rmcast_status_name(st), rmcast_last_error());
  }
  check(st == RMCAST_STATUS_OK, what);
}

/* Progress of the send: called on the sending thread only. */
static int progress_calls;
static uint64_t progress_done;

static void on_progress(uint64_t done, uint64_t total, const char *phase, void *user) {
  (void)total;
  (void)phase;
  *(int *)user += 1;
  progress_done = done;
}

static char group[32];
static char key_path[256];

struct receiver {
  int index;
  RmcastStatus status;
  char error[512];
  RmcastBuffer buf;
};

static void *receive(void *arg) {
  struct receiver *r = arg;
  char name[32];
  snprintf(name, sizeof name, "c-receiver-%d", r->index);
  RmcastConfig *cfg = rmcast_config_new();
  r->status = rmcast_config_set_group(cfg, group);
  if (r->status == RMCAST_STATUS_OK) r->status = rmcast_config_set_key_file(cfg, key_path);
  if (r->status == RMCAST_STATUS_OK) r->status = rmcast_config_set_name(cfg, name);
  if (r->status == RMCAST_STATUS_OK) r->status = rmcast_config_set_timeout_ms(cfg, 20000);
  if (r->status == RMCAST_STATUS_OK) r->status = rmcast_recv_buffer(cfg, &r->buf, NULL);
  if (r->status != RMCAST_STATUS_OK) {
    snprintf(r->error, sizeof r->error, "%s", rmcast_last_error());
  }
  rmcast_config_free(cfg);
  return NULL;
}

static void wrong_arguments(const char *dir) {
  char not_a_key[300];
  snprintf(not_a_key, sizeof not_a_key, "%s/not-a.key", dir);
  FILE *f = fopen(not_a_key, "w");
  if (f) {
    fputs("this is not a group key\n", f);
    fclose(f);
  }
  RmcastConfig *cfg = rmcast_config_new();
  check(cfg != NULL, "rmcast_config_new");
  RmcastReport *report = (RmcastReport *)&report; /* must be set to NULL */
  RmcastBuffer buf = {(uint8_t *)&buf, 99};      /* must be set to {NULL, 0} */
  uint8_t byte = 42;

  expect(rmcast_config_set_group(NULL, "239.1.2.3:7000"), RMCAST_STATUS_INVALID_ARGUMENT,
         "set_group on a NULL config");
  expect(rmcast_config_set_group(cfg, NULL), RMCAST_STATUS_INVALID_ARGUMENT, "a NULL group");
  expect(rmcast_config_set_group(cfg, "not a group"), RMCAST_STATUS_INVALID_ARGUMENT,
         "a group that does not parse");
  expect(rmcast_config_set_group(cfg, "10.1.2.3:7000"), RMCAST_STATUS_INVALID_ARGUMENT,
         "a group that is not multicast");
  expect(rmcast_config_set_group(cfg, "239.1.2.3:0"), RMCAST_STATUS_INVALID_ARGUMENT,
         "a group on port 0");
  expect(rmcast_config_set_iface(cfg, "localhost:7"), RMCAST_STATUS_INVALID_ARGUMENT,
         "a bad interface");
  expect(rmcast_config_set_receivers(cfg, 0), RMCAST_STATUS_INVALID_ARGUMENT, "zero receivers");
  expect(rmcast_config_set_protocol(cfg, "nakpoll"), RMCAST_STATUS_INVALID_ARGUMENT,
         "an unknown protocol");
  check(strstr(rmcast_last_error(), "one of auto, ack, nak-poll") != NULL,
        "the protocol message lists the names");
  expect(rmcast_config_set_protocol(cfg, "tcp-chain"), RMCAST_STATUS_INVALID_ARGUMENT,
         "a TCP overlay");
  expect(rmcast_config_set_fec(cfg, "64"), RMCAST_STATUS_INVALID_ARGUMENT, "a FEC shape without P");
  expect(rmcast_config_set_laggard(cfg, "wait", 500), RMCAST_STATUS_INVALID_ARGUMENT,
         "a laggard delay with wait");
  expect(rmcast_config_set_laggard(cfg, "tcp", 10), RMCAST_STATUS_INVALID_ARGUMENT,
         "a laggard delay under 100 ms");
  must(rmcast_config_set_protocol(cfg, "ring"), "protocol ring");
  expect(rmcast_config_set_fec(cfg, "64:2:0"), RMCAST_STATUS_INVALID_ARGUMENT,
         "a FEC shape of no interleaved blocks");
  must(rmcast_config_set_fec(cfg, "64:2:8"), "fec 64:2:8, interleaved");
  must(rmcast_config_set_fec(cfg, "off"), "fec off");
  must(rmcast_config_set_laggard(cfg, "tcp", 0), "laggard tcp");
  must(rmcast_config_set_protocol(cfg, NULL), "protocol back to auto");
  expect(rmcast_config_set_key_file(cfg, "/nonexistent/rmcast-test.key"), RMCAST_STATUS_KEY,
         "a missing key file");
  expect(rmcast_config_set_key_file(cfg, not_a_key), RMCAST_STATUS_KEY,
         "a file that is not a key file");
  unlink(not_a_key);

  /* Neither a key nor insecure: refused, and the message says how. */
  RmcastStatus st = rmcast_send_buffer(cfg, "x", &byte, 1, &report);
  expect(st, RMCAST_STATUS_KEY, "a send without a key");
  check(strstr(rmcast_last_error(), "rmcast_keygen") != NULL, "the no-key message names rmcast_keygen");
  check(report == NULL, "a failed send leaves *report NULL");
  expect(rmcast_recv_buffer(cfg, &buf, NULL), RMCAST_STATUS_KEY, "a receive without a key");
  check(buf.data == NULL && buf.len == 0, "a failed receive leaves the buffer {NULL, 0}");
  RmcastStreamSender *ss = (RmcastStreamSender *)&ss;
  expect(rmcast_stream_sender_open(cfg, &ss), RMCAST_STATUS_KEY, "a stream without a key");
  check(ss == NULL, "a failed open leaves *out NULL");

  expect(rmcast_send_buffer(NULL, "x", &byte, 1, NULL), RMCAST_STATUS_INVALID_ARGUMENT,
         "a send with a NULL config");
  expect(rmcast_send_buffer(cfg, NULL, &byte, 1, NULL), RMCAST_STATUS_INVALID_ARGUMENT,
         "a send with a NULL name");
  expect(rmcast_send_buffer(cfg, "x", NULL, 5, NULL), RMCAST_STATUS_INVALID_ARGUMENT,
         "a send of 5 bytes at NULL");
  expect(rmcast_send_file(cfg, NULL, NULL), RMCAST_STATUS_INVALID_ARGUMENT,
         "a send of a NULL path");
  expect(rmcast_recv_buffer(cfg, NULL, NULL), RMCAST_STATUS_INVALID_ARGUMENT,
         "a receive into a NULL buffer");
  expect(rmcast_recv_file(cfg, NULL, NULL), RMCAST_STATUS_INVALID_ARGUMENT,
         "a receive into a NULL directory");
  expect(rmcast_stream_read(NULL, &buf), RMCAST_STATUS_INVALID_ARGUMENT,
         "a read from a NULL stream");
  expect(rmcast_stream_sender_close(NULL, NULL), RMCAST_STATUS_INVALID_ARGUMENT,
         "closing a NULL stream");
  expect(rmcast_keygen(NULL), RMCAST_STATUS_INVALID_ARGUMENT, "keygen to a NULL path");
  char small[8];
  expect(rmcast_random_group(small, sizeof small), RMCAST_STATUS_INVALID_ARGUMENT,
         "a random group into 8 bytes");

  /* Insecure, a file that is not there: an I/O error naming it. */
  must(rmcast_config_set_insecure(cfg, 1), "set_insecure");
  check(rmcast_last_error()[0] == '\0', "a call that succeeded clears the last error");
  expect(rmcast_send_file(cfg, "/nonexistent/object.bin", NULL), RMCAST_STATUS_IO,
         "a send of a missing file");
  check(strstr(rmcast_last_error(), "/nonexistent/object.bin") != NULL,
        "the message names the missing file");

  /* NULL handles are harmless where the header says so. */
  rmcast_config_free(NULL);
  rmcast_report_free(NULL);
  rmcast_buffer_free(NULL);
  rmcast_cancel_free(NULL);
  rmcast_cancel_raise(NULL);
  check(rmcast_report_ok(NULL) == 0 && rmcast_report_json(NULL) == NULL, "NULL report getters");
  rmcast_config_free(cfg);
}

static void round_trip(void) {
  uint8_t *data = malloc(SIZE);
  uint32_t x = 2463534242u;
  for (size_t i = 0; i < SIZE; i++) { /* xorshift32: no run of equal bytes */
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    data[i] = (uint8_t)x;
  }

  RmcastConfig *cfg = rmcast_config_new();
  must(rmcast_config_set_group(cfg, group), "sender set_group");
  must(rmcast_config_set_key_file(cfg, key_path), "sender set_key_file");
  must(rmcast_config_set_receivers(cfg, RECEIVERS), "sender set_receivers");
  must(rmcast_config_set_timeout_ms(cfg, 20000), "sender set_timeout_ms");
  must(rmcast_config_set_progress(cfg, on_progress, &progress_calls), "sender set_progress");

  pthread_t threads[RECEIVERS];
  struct receiver rx[RECEIVERS];
  memset(rx, 0, sizeof rx);
  for (int i = 0; i < RECEIVERS; i++) {
    rx[i].index = i;
    pthread_create(&threads[i], NULL, receive, &rx[i]);
  }

  RmcastReport *report = NULL;
  RmcastStatus st = rmcast_send_buffer(cfg, "roundtrip.bin", data, SIZE, &report);
  must(st, "send_buffer to 4 receivers");
  check(report != NULL, "the send hands out a report");
  if (report) {
    printf("sent %llu bytes to %llu receivers in %.3f s (%.1f Mbit/s), %llu verified\n",
           (unsigned long long)rmcast_report_bytes(report),
           (unsigned long long)rmcast_report_receivers(report), rmcast_report_seconds(report),
           rmcast_report_goodput_mbps(report), (unsigned long long)rmcast_report_verified(report));
    printf("report: %s\n", rmcast_report_json(report));
    check(rmcast_report_ok(report) == 1, "report ok");
    check(rmcast_report_bytes(report) == SIZE, "report bytes");
    check(rmcast_report_receivers(report) == RECEIVERS, "report receivers");
    check(rmcast_report_verified(report) == RECEIVERS, "report verified");
    check(rmcast_report_failure_count(report) == 0, "no failures");
    for (size_t i = 0; i < rmcast_report_failure_count(report); i++) {
      fprintf(stderr, "  %s at %s: %s\n", rmcast_report_failure_name(report, i),
              rmcast_report_failure_addr(report, i), rmcast_report_failure_reason(report, i));
    }
    check(strstr(rmcast_report_json(report), "\"sealed\":true") != NULL, "the session was sealed");
  }
  rmcast_report_free(report);
  check(progress_calls > 0 && progress_done == SIZE, "progress reached the whole object");

  for (int i = 0; i < RECEIVERS; i++) {
    pthread_join(threads[i], NULL);
    char what[64];
    snprintf(what, sizeof what, "receiver %d got the object", i);
    if (rx[i].status != RMCAST_STATUS_OK) {
      fprintf(stderr, "receiver %d: %s: %s\n", i, rmcast_status_name(rx[i].status), rx[i].error);
    }
    check(rx[i].status == RMCAST_STATUS_OK, what);
    snprintf(what, sizeof what, "receiver %d: every byte matches", i);
    check(rx[i].buf.len == SIZE && memcmp(rx[i].buf.data, data, SIZE) == 0, what);
    rmcast_buffer_free(&rx[i].buf);
    check(rx[i].buf.data == NULL && rx[i].buf.len == 0, "buffer_free empties the buffer");
    rmcast_buffer_free(&rx[i].buf); /* a second free does nothing */
  }
  rmcast_config_free(cfg);
  free(data);
}

static void cancelled(void) {
  char other[32];
  must(rmcast_random_group(other, sizeof other), "random_group");
  RmcastConfig *cfg = rmcast_config_new();
  RmcastCancel *cancel = rmcast_cancel_new();
  must(rmcast_config_set_group(cfg, other), "set_group");
  must(rmcast_config_set_insecure(cfg, 1), "set_insecure");
  must(rmcast_config_set_timeout_ms(cfg, 10000), "set_timeout_ms");
  must(rmcast_config_set_cancel(cfg, cancel), "set_cancel");
  rmcast_cancel_raise(cancel);
  check(rmcast_cancel_is_raised(cancel) == 1, "the token is raised");
  rmcast_cancel_free(cancel); /* the config keeps its own reference */
  RmcastBuffer buf = {NULL, 0};
  expect(rmcast_recv_buffer(cfg, &buf, NULL), RMCAST_STATUS_CANCELLED, "a cancelled receive");
  rmcast_config_free(cfg);
}

/* A signal handler may raise a token: one atomic store, nothing else. */
static RmcastCancel *alarm_token;

static void on_alarm(int sig) {
  (void)sig;
  rmcast_cancel_raise(alarm_token);
}

static void cancelled_by_a_signal(void) {
  char other[32];
  must(rmcast_random_group(other, sizeof other), "random_group");
  RmcastConfig *cfg = rmcast_config_new();
  alarm_token = rmcast_cancel_new();
  must(rmcast_config_set_group(cfg, other), "set_group");
  must(rmcast_config_set_insecure(cfg, 1), "set_insecure");
  must(rmcast_config_set_timeout_ms(cfg, 10000), "set_timeout_ms");
  must(rmcast_config_set_cancel(cfg, alarm_token), "set_cancel");

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, NULL);
  struct itimerval in_300ms = {{0, 0}, {0, 300000}};
  setitimer(ITIMER_REAL, &in_300ms, NULL);

  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  RmcastBuffer buf = {NULL, 0};
  /* Nobody sends on this group: only the signal ends the wait. */
  expect(rmcast_recv_buffer(cfg, &buf, NULL), RMCAST_STATUS_CANCELLED,
         "a receive cancelled from a SIGALRM handler");
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double waited = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  printf("the signal stopped the receive after %.3f s\n", waited);
  check(waited < 3.0, "the cancelled receive returned soon after the signal");

  signal(SIGALRM, SIG_DFL);
  rmcast_config_free(cfg);
  rmcast_cancel_free(alarm_token);
  alarm_token = NULL;
}

int main(void) {
  printf("librmcast_ffi %s\n", rmcast_version());
  char dir[] = "/tmp/rmcast-c-XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  wrong_arguments(dir);
  snprintf(key_path, sizeof key_path, "%s/group.key", dir);
  must(rmcast_keygen(key_path), "keygen");
  expect(rmcast_keygen(key_path), RMCAST_STATUS_IO, "keygen over an existing key");
  must(rmcast_random_group(group, sizeof group), "random_group");
  printf("group %s, key %s\n", group, key_path);

  round_trip();
  cancelled();
  cancelled_by_a_signal();

  unlink(key_path);
  rmdir(dir);
  printf("roundtrip: %d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
