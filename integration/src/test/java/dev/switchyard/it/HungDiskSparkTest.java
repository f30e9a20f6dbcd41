package dev.switchyard.it;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A disk that hangs under a real Spark job. Switchyard gets two data directories: the first on a
 * real ext4 filesystem on a loop device, frozen with {@code fsfreeze -f} before the job (every
 * write to it then blocks in the kernel, as on a dead device), the second an ordinary directory.
 * The job (the large job, far over the 128 MiB memory budget, so it must spill) runs with the
 * stock Uniffle client; flushes to the frozen disk outlive {@code io_timeout} (2 s), the disk is
 * marked hung and the data goes to the other one. The result equals Spark's own shuffle and the
 * status shows the disk hung. The restart manifest is on the frozen disk as well (its default
 * place): reports must not wait on it past io_timeout, and the status shows it stalled.
 *
 * <p>Needs root, loop devices, mkfs.ext4 and fsfreeze (CI has them); elsewhere it is skipped with
 * the reason. Tag {@code cold} (run-cold-tier.sh): the tier-fault tests.
 */
@Tag("cold")
@Timeout(value = 10, unit = TimeUnit.MINUTES)
class HungDiskSparkTest {

  static Path image;
  static Path mount;
  static String loop;
  static boolean frozen;

  static String run(String... cmd) throws IOException, InterruptedException {
    Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).trim();
    if (!p.waitFor(60, TimeUnit.SECONDS) || p.exitValue() != 0) {
      throw new IOException(String.join(" ", cmd) + " failed: " + out);
    }
    return out;
  }

  @BeforeAll
  static void makeDisk() throws Exception {
    Path dir = Paths.get("target", "hung-disk").toAbsolutePath();
    Files.createDirectories(dir);
    image = dir.resolve("disk.img");
    mount = dir.resolve("mnt");
    Files.createDirectories(mount);
    try {
      run("truncate", "-s", "768M", image.toString());
      loop = run("losetup", "-f", "--show", image.toString());
      run("mkfs.ext4", "-q", loop);
      run("mount", loop, mount.toString());
    } catch (IOException e) {
      cleanUp();
      Assumptions.assumeTrue(false, "SKIPPED: no loop-mounted ext4 here (" + e.getMessage() + ")");
    }
  }

  @AfterAll
  static void cleanUp() throws Exception {
    List<String> errors = new ArrayList<>();
    for (String[] cmd : new String[][] {
        frozen ? new String[] {"fsfreeze", "-u", String.valueOf(mount)} : null,
        loop != null ? new String[] {"umount", String.valueOf(mount)} : null,
        loop != null ? new String[] {"losetup", "-d", loop} : null}) {
      if (cmd == null) {
        continue;
      }
      try {
        run(cmd);
      } catch (IOException e) {
        errors.add(e.getMessage());
      }
    }
    frozen = false;
    loop = null;
    if (image != null) {
      Files.deleteIfExists(image);
    }
    if (!errors.isEmpty()) {
      System.out.println("[suite] HungDiskSparkTest clean-up: " + errors);
    }
  }

  @Test
  void aFrozenDiskIsMarkedHungAndTheJobCompletesOnTheOther() throws Exception {
    Path frozenDir = mount.resolve("switchyard");
    Files.createDirectories(frozenDir);
    SwitchyardProcess server = SwitchyardProcess.startWithDisks(
        "hung-disk", "128MiB", List.of(frozenDir), "io_timeout = \"2s\"\n");
    try {
      run("fsfreeze", "-f", mount.toString());
      frozen = true;
      long records = 2_000_000L;
      SparkHarness.compareWithVanilla(
          "hungDisk",
          server,
          spark -> Jobs.largeShuffle(spark, records),
          (e, a) -> Compare.sameList("largeShuffle with a frozen disk, per partition", e, a));
      String status = server.adminGet("/api/v1/status");
      if (!status.contains("\"health\":\"hung\"")) {
        throw new AssertionError("the frozen disk is not reported hung: " + status);
      }
      // The manifest lives on the frozen disk too: its writes must not hold
      // the job's reports (they wait io_timeout once, then stop waiting).
      if (!status.contains("\"manifest_stalled\":true")) {
        throw new AssertionError("the manifest on the frozen disk is not reported stalled: " + status);
      }
      System.out.println("[suite] HungDiskSparkTest: the frozen disk was marked hung; the job equals vanilla");
      SparkHarness.appendTiming("hungDisk       a frozen first disk: marked hung, job equals vanilla");
    } finally {
      // Thaw first: the calls stuck on it return, so the node can stop.
      if (frozen) {
        run("fsfreeze", "-u", mount.toString());
        frozen = false;
      }
      server.close();
    }
  }
}
