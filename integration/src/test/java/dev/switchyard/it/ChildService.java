package dev.switchyard.it;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;

/**
 * A helper server in a child process (the S3 server, MiniDFS) for the cold-tier tests: started
 * with its stdout+stderr in a log file and its standard input a pipe from this JVM, so that it
 * ends when this JVM does even without {@link #close()} (both helpers exit when their standard
 * input closes); ready once it has written its address file. {@link #close()} stops exactly this
 * process: SIGTERM to its PID, then SIGKILL after a grace period.
 */
abstract class ChildService implements AutoCloseable {

  private final String name;
  private final Path log;
  private Process process;
  private Thread reaper;

  ChildService(String name, Path log) {
    this.name = name;
    this.log = log;
  }

  /**
   * Starts {@code command} and waits up to {@code timeout} for {@code readyFile} to exist. Throws
   * (with the log tail) if the process exits first or the file does not appear in time.
   */
  protected void launch(List<String> command, Path workDir, Path readyFile, Duration timeout) throws IOException {
    launch(command, workDir, () -> Files.exists(readyFile), "no " + readyFile, timeout);
  }

  /**
   * Starts {@code command} and waits up to {@code timeout} until {@code ready} holds; {@code
   * notReady} says what was missing when it never did.
   */
  protected void launch(List<String> command, Path workDir, BooleanSupplier ready, String notReady, Duration timeout)
      throws IOException {
    Files.createDirectories(log.getParent());
    Files.writeString(log, "# " + String.join(" ", command) + "\n", StandardCharsets.UTF_8);
    ProcessBuilder pb =
        new ProcessBuilder(command)
            .directory(workDir.toFile())
            .redirectErrorStream(true)
            .redirectOutput(ProcessBuilder.Redirect.appendTo(log.toFile()));
    // stdin stays a pipe (the default): closed when this JVM ends, which stops the child.
    long start = System.nanoTime();
    process = pb.start();
    Process started = process;
    reaper = new Thread(started::destroyForcibly, name + "-reaper");
    Runtime.getRuntime().addShutdownHook(reaper);
    long deadline = start + timeout.toNanos();
    while (!ready.getAsBoolean()) {
      if (!process.isAlive()) {
        throw new IllegalStateException(
            name + " exited with status " + process.exitValue() + " before it was ready\n" + logTail(60));
      }
      if (System.nanoTime() > deadline) {
        String tail = logTail(60);
        close();
        throw new IllegalStateException(
            name + " not ready within " + timeout.toSeconds() + " s (" + notReady + ")\n" + tail);
      }
      sleep(100);
    }
    System.out.printf(
        "[%s] pid %d ready after %d ms, log %s%n", name, process.pid(), (System.nanoTime() - start) / 1_000_000, log);
  }

  String name() {
    return name;
  }

  long pid() {
    return process.pid();
  }

  Path logFile() {
    return log;
  }

  /** Throws, with the log tail, if the process has died. */
  public void assertAlive() {
    if (process != null && !process.isAlive()) {
      throw new IllegalStateException(name + " died (exit status " + process.exitValue() + ")\n" + logTail(60));
    }
  }

  String logTail(int lines) {
    try {
      List<String> all = Files.readAllLines(log, StandardCharsets.UTF_8);
      List<String> tail = all.subList(Math.max(0, all.size() - lines), all.size());
      return "---- last " + tail.size() + " lines of " + log + " ----\n" + String.join("\n", tail) + "\n---- end ----";
    } catch (IOException | UncheckedIOException e) {
      return "(could not read " + log + ": " + e + ")";
    }
  }

  /** SIGTERM to this process, up to 30 s for it to exit, then SIGKILL. */
  @Override
  public void close() {
    if (process != null && process.isAlive()) {
      long start = System.nanoTime();
      process.destroy();
      boolean exited = waitFor(Duration.ofSeconds(30));
      if (!exited) {
        System.err.printf("[%s] still running 30 s after SIGTERM, killing pid %d%n", name, process.pid());
        process.destroyForcibly();
        waitFor(Duration.ofSeconds(10));
      } else {
        System.out.printf("[%s] stopped in %d ms%n", name, (System.nanoTime() - start) / 1_000_000);
      }
    }
    if (reaper != null) {
      try {
        Runtime.getRuntime().removeShutdownHook(reaper);
      } catch (IllegalStateException e) {
        // the JVM is shutting down
      }
      reaper = null;
    }
  }

  private boolean waitFor(Duration d) {
    try {
      return process.waitFor(d.toMillis(), TimeUnit.MILLISECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return !process.isAlive();
    }
  }

  static void sleep(long ms) {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    }
  }
}
