package dev.switchyard.it;

import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * After a job: the node's {@code /api/v1/apps} (what the status page's "Finished applications"
 * table draws) lists the job's application as finished, ended by its client, with the client's
 * version and the bytes it wrote and read.
 */
final class FinishedApps {

  private static final Pattern ROW = Pattern.compile(
      "\"protocol\":\"([a-z]+)\",\"id\":\"([^\"]*)\",\"client\":(null|\"[^\"]*\"),"
          + "\"written_bytes\":(\\d+),\"read_bytes\":(\\d+),\"peak_memory_bytes\":(\\d+),"
          + "[^{}]*\"removed\":\\{\"unix_ms\":(\\d+),[^{}]*\\}[^{}]*\"ended\":\"([a-z]+)\"");

  private FinishedApps() {}

  /**
   * Whether the Uniffle client under test tells its version: only 0.10 and later do (the {@code
   * version} of registerApplicationInfo); 0.9.x clients are listed with no client.
   */
  static boolean uniffleClientTellsVersion() {
    return !Pattern.compile("(^|[^0-9.])0\\.[0-9]\\.").matcher(SparkHarness.clientLabel()).find();
  }

  /**
   * Waits up to 30 s for an application of {@code protocol} that finished at or after {@code
   * sinceUnixMs}, and checks its row (with its client's version when {@code withClient}); nothing
   * to check without a server (vanilla-only runs).
   */
  static void assertListed(SwitchyardProcess server, String protocol, long sinceUnixMs, boolean withClient)
      throws Exception {
    if (server == null) {
      return;
    }
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    String body;
    while (true) {
      body = server.adminGet("/api/v1/apps");
      String finished = body.substring(body.indexOf("\"finished\":["));
      Matcher m = ROW.matcher(finished);
      while (m.find()) {
        if (!m.group(1).equals(protocol) || Long.parseLong(m.group(7)) < sinceUnixMs) {
          continue;
        }
        String row = m.group();
        if (withClient == m.group(3).equals("null")) {
          throw new AssertionError((withClient ? "no client version: " : "a client version from nowhere: ") + row);
        }
        if (Long.parseLong(m.group(4)) <= 0 || Long.parseLong(m.group(5)) <= 0) {
          throw new AssertionError("no bytes written or read: " + row);
        }
        if (!m.group(8).equals("unregistered")) {
          throw new AssertionError("the client ended the job, not its lease: " + row);
        }
        System.out.println("[finished] " + row);
        return;
      }
      if (System.nanoTime() > deadline) {
        throw new AssertionError("no finished " + protocol + " application in /api/v1/apps: " + body);
      }
      Thread.sleep(250);
    }
  }
}
