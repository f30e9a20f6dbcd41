package dev.switchyard.it;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.spark.SparkConf;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A server that hangs in the middle of a job (SIGSTOP once the store has taken some data: its
 * sockets stay open, nothing answers) must fail the Celeborn job within our fail-fast settings
 * (push, fetch and RPC timeouts) rather than hang it. Needs switchyard; skipped in vanilla-only
 * mode.
 */
@Tag("celeborn")
class CelebornHungServerTest {

  @Test
  @Timeout(value = 8, unit = TimeUnit.MINUTES)
  void jobFailsWhenServerHangsMidShuffle() throws Exception {
    Assumptions.assumeFalse(SparkHarness.vanillaOnly(), "needs switchyard");
    String writer = SparkHarness.celebornWriters().get(0);
    try (SwitchyardProcess server = SwitchyardProcess.startWithCeleborn("celeborn-hung", "128MiB")) {
      SparkConf conf = SparkHarness.withCeleborn(
          SparkHarness.baseConf("celeborn-hung", SparkHarness.CELEBORN_MASTER),
          server.celebornMasterEndpoint(), writer);
      long base = server.appendedBytes();
      AtomicLong stoppedAt = new AtomicLong();
      Thread stopper = new Thread(() -> {
        try {
          while (server.appendedBytes() - base < 20_000_000L) {
            Thread.sleep(20);
          }
          new ProcessBuilder("kill", "-STOP", Long.toString(server.pid())).inheritIO().start().waitFor();
          stoppedAt.set(System.nanoTime());
          System.out.printf("[suite] hung server: SIGSTOP after %d MB appended%n",
              (server.appendedBytes() - base) / 1_000_000);
        } catch (InterruptedException e) {
          // test over
        } catch (Exception | AssertionError e) {
          System.err.println("hung server: stopper failed: " + e);
        }
      }, "sigstop");
      stopper.setDaemon(true);
      stopper.start();
      AtomicLong jobFailedAt = new AtomicLong();
      Throwable failure = null;
      try {
        SparkHarness.runApp(conf, spark -> {
          try {
            return Jobs.largeShuffle(spark, 5_000_000L);
          } catch (Throwable e) {
            jobFailedAt.set(System.nanoTime());
            throw CelebornHungServerTest.<RuntimeException>sneaky(e);
          }
        });
      } catch (Throwable t) {
        failure = t;
      } finally {
        stopper.interrupt();
        new ProcessBuilder("kill", "-CONT", Long.toString(server.pid())).inheritIO().start().waitFor();
      }
      long end = System.nanoTime();
      assertTrue(stoppedAt.get() != 0, "the job ended before the server was stopped: " + failure);
      assertTrue(failure != null, "the job succeeded although the server was stopped");
      long failMs = ((jobFailedAt.get() == 0 ? end : jobFailedAt.get()) - stoppedAt.get()) / 1_000_000;
      long stopMs = (end - stoppedAt.get()) / 1_000_000;
      System.out.printf("[suite] hung server (%s): job failed %d ms after SIGSTOP, session stopped after %d ms: %s%n",
          writer, failMs, stopMs, ClientSmokeTest.chain(failure));
      SparkHarness.appendTiming(String.format(
          "hungServer/%s job failed %d ms after SIGSTOP, SparkSession stopped after %d ms", writer, failMs, stopMs));
      assertTrue(failMs < 150_000, "the job took " + failMs + " ms to fail after the server hung");
    }
  }

  /** Rethrows {@code t} unchanged (Spark throws checked SparkExceptions through Scala code). */
  @SuppressWarnings("unchecked")
  static <E extends Throwable> E sneaky(Throwable t) throws E {
    throw (E) t;
  }
}
