package io.idem;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * A running `idem serve` ($IDEM_BIN) on port 0 with an SQLite store in a temporary
 * directory and two tenants; its config gives biz_type `expiring` a 1 s retention and
 * it purges every 200 ms (the case table's server).
 */
final class Serve implements AutoCloseable {
  final String url;
  final String token1 = Idem.fingerprint(("t1" + System.nanoTime()).getBytes(StandardCharsets.UTF_8));
  final String token2 = Idem.fingerprint(("t2" + System.nanoTime()).getBytes(StandardCharsets.UTF_8));
  private final Process proc;
  private final Path dir;
  private final Path log;

  static final String CONFIG = String.join("\n",
      "[retention.expiring]",
      "redelivery = \"0s\"",
      "recon_cycle = \"0s\"",
      "confirm_window = \"0s\"",
      "margin = \"1s\"",
      "");

  Serve() throws IOException, InterruptedException {
    this(null);
  }

  /** A server on store (null: an SQLite store of its own). */
  Serve(String store) throws IOException, InterruptedException {
    dir = Files.createTempDirectory("idem-java-serve");
    log = dir.resolve("serve.log");
    Path config = dir.resolve("idem.toml");
    Files.writeString(config, CONFIG);
    List<String> cmd = new ArrayList<>(List.of(TestDb.idemBin(), "--config", config.toString(),
        "serve", "--listen", "127.0.0.1:0", "--store", store != null ? store : "sqlite://" + dir.resolve("idem.db"),
        "--purge-every", "1s", // idem serve refuses less than 1s
        "--tenant", "t1:sha256:" + Idem.fingerprint(token1.getBytes(StandardCharsets.UTF_8)),
        "--tenant", "t2:sha256:" + Idem.fingerprint(token2.getBytes(StandardCharsets.UTF_8))));
    proc = new ProcessBuilder(cmd).redirectError(log.toFile()).start();
    BlockingQueue<String> first = new ArrayBlockingQueue<>(1);
    Thread drain = new Thread(() -> {
      try (BufferedReader r = new BufferedReader(
          new InputStreamReader(proc.getInputStream(), StandardCharsets.UTF_8))) {
        String line = r.readLine();
        first.add(line == null ? "" : line.trim());
        while (r.readLine() != null) {
          // keeps the pipe drained
        }
      } catch (IOException e) {
        first.offer("");
      }
    });
    drain.setDaemon(true);
    drain.start();
    String line = first.poll(30, TimeUnit.SECONDS);
    if (line == null || !line.startsWith("listening on ")) {
      proc.destroyForcibly();
      throw new IllegalStateException("idem serve did not start (first line '" + line
          + "'); log:\n" + Files.readString(log));
    }
    url = "http://" + line.substring("listening on ".length());
  }

  Client client() {
    return client(token1);
  }

  /** A client with a bearer token that makes one attempt per call. */
  Client client(String token) {
    return new Client(url, token, java.net.http.HttpClient.newHttpClient(), Retry.NONE,
        java.time.Duration.ofSeconds(30), 16L << 20);
  }

  @Override
  public void close() throws Exception {
    proc.destroy(); // SIGTERM
    if (!proc.waitFor(20, TimeUnit.SECONDS)) {
      proc.destroyForcibly();
      throw new IllegalStateException("idem serve did not stop on SIGTERM");
    }
    int rc = proc.exitValue();
    String text = Files.readString(log);
    try (var files = Files.walk(dir)) {
      files.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    }
    if (rc != 0) {
      throw new IllegalStateException("idem serve on SIGTERM exited " + rc + "; log:\n" + text);
    }
  }
}
