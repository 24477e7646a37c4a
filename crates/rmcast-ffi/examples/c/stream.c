/* stream.c: a PRMP message stream from C, on this machine only.
 *
 * A stream sender announces a stream on a random group (127.0.0.1, TTL 1),
 * sealed under a fresh group key, and admits 3 receiver threads; it sends
 * MESSAGES messages of varying sizes, each filled from its index, then
 * closes. Every receiver checks every message (order, length, content),
 * then the end of the stream; the sender's close must report that all 3
 * confirmed everything.
 *
 * Exits 0 when every check passed, 1 otherwise; the last line says
 * "stream: N passed, M failed".
 */
#define _POSIX_C_SOURCE 200809L
#include "rmcast.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RECEIVERS 3
#define MESSAGES 200

static int passed, failed;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void check(int ok, const char *what) {
  pthread_mutex_lock(&lock);
  if (ok) {
    passed++;
  } else {
    failed++;
    fprintf(stderr, "FAILED: %s\n", what);
  }
  pthread_mutex_unlock(&lock);
}

static void must(RmcastStatus st, const char *what) {
  if (st != RMCAST_STATUS_OK) {
    fprintf(stderr, "%s: %s: %s\n", what, rmcast_status_name(st), rmcast_last_error());
  }
  check(st == RMCAST_STATUS_OK, what);
}

static char group[32];
static char key_path[256];

/* Message i: (i * 7919) % 9000 + 1 bytes, byte j = (i + j) & 0xff. */
static size_t message_len(int i) { return (size_t)(i * 7919) % 9000 + 1; }

static void fill(uint8_t *buf, int i) {
  for (size_t j = 0; j < message_len(i); j++) buf[j] = (uint8_t)(i + j);
}

static int matches(const RmcastBuffer *b, int i) {
  if (b->len != message_len(i)) return 0;
  for (size_t j = 0; j < b->len; j++) {
    if (b->data[j] != (uint8_t)(i + j)) return 0;
  }
  return 1;
}

static void *receive(void *arg) {
  int index = *(int *)arg;
  char name[32];
  snprintf(name, sizeof name, "c-stream-receiver-%d", index);
  RmcastConfig *cfg = rmcast_config_new();
  must(rmcast_config_set_group(cfg, group), "receiver set_group");
  must(rmcast_config_set_key_file(cfg, key_path), "receiver set_key_file");
  must(rmcast_config_set_name(cfg, name), "receiver set_name");
  must(rmcast_config_set_timeout_ms(cfg, 20000), "receiver set_timeout_ms");
  RmcastStreamReceiver *r = NULL;
  must(rmcast_stream_receiver_open(cfg, &r), "stream_receiver_open");
  rmcast_config_free(cfg); /* the stream does not refer to it */
  if (!r) return NULL;

  int got = 0, good = 0;
  RmcastStatus st;
  RmcastBuffer msg = {NULL, 0};
  while ((st = rmcast_stream_read(r, &msg)) == RMCAST_STATUS_OK) {
    good += matches(&msg, got);
    got++;
    rmcast_buffer_free(&msg);
  }
  if (st != RMCAST_STATUS_END_OF_STREAM) {
    fprintf(stderr, "%s: read: %s: %s\n", name, rmcast_status_name(st), rmcast_last_error());
  }
  check(st == RMCAST_STATUS_END_OF_STREAM, "the stream ends with END_OF_STREAM");
  check(got == MESSAGES, "every message arrived");
  check(good == MESSAGES, "every message is intact and in order");

  RmcastReport *report = NULL;
  must(rmcast_stream_receiver_close(r, &report), "stream_receiver_close (complete)");
  check(rmcast_report_ok(report) == 1, "the receiver's report says complete");
  rmcast_report_free(report);
  return NULL;
}

int main(void) {
  char dir[] = "/tmp/rmcast-c-stream-XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  snprintf(key_path, sizeof key_path, "%s/group.key", dir);
  must(rmcast_keygen(key_path), "keygen");
  must(rmcast_random_group(group, sizeof group), "random_group");
  printf("group %s, key %s\n", group, key_path);

  RmcastConfig *cfg = rmcast_config_new();
  must(rmcast_config_set_group(cfg, group), "sender set_group");
  must(rmcast_config_set_key_file(cfg, key_path), "sender set_key_file");
  must(rmcast_config_set_receivers(cfg, RECEIVERS), "sender set_receivers");
  must(rmcast_config_set_timeout_ms(cfg, 20000), "sender set_timeout_ms");

  pthread_t threads[RECEIVERS];
  int index[RECEIVERS];
  for (int i = 0; i < RECEIVERS; i++) {
    index[i] = i;
    pthread_create(&threads[i], NULL, receive, &index[i]);
  }

  RmcastStreamSender *s = NULL;
  must(rmcast_stream_sender_open(cfg, &s), "stream_sender_open");
  rmcast_config_free(cfg);
  if (s) {
    size_t established = 0;
    must(rmcast_stream_sender_wait(s, &established), "stream_sender_wait");
    printf("established with %zu receivers\n", established);
    uint8_t *buf = malloc(9000);
    for (int i = 0; i < MESSAGES; i++) {
      fill(buf, i);
      RmcastStatus st = rmcast_stream_send(s, buf, message_len(i));
      if (st != RMCAST_STATUS_OK) {
        must(st, "stream_send");
        break;
      }
    }
    free(buf);
    RmcastReport *report = NULL;
    must(rmcast_stream_sender_close(s, &report), "stream_sender_close");
    if (report) {
      printf("report: %s\n", rmcast_report_json(report));
      check(rmcast_report_ok(report) == 1, "the sender's report is ok");
      check(rmcast_report_verified(report) == RECEIVERS, "every receiver confirmed everything");
      check(rmcast_report_failure_count(report) == 0, "no receiver failed");
    } else {
      check(0, "the close hands out a report");
    }
    rmcast_report_free(report);
  }

  for (int i = 0; i < RECEIVERS; i++) pthread_join(threads[i], NULL);
  unlink(key_path);
  rmdir(dir);
  printf("stream: %d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
