package io.idem;

import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CopyOnWriteArrayList;

/** An in-process HTTP server answering queued answers and recording the requests (tests). */
final class FakeServer implements AutoCloseable {
  record Seen(String method, String path, String rawPath, Map<String, List<String>> headers,
              String body) {
    String header(String name) {
      for (Map.Entry<String, List<String>> e : headers.entrySet()) {
        if (e.getKey().equalsIgnoreCase(name)) {
          return e.getValue().get(0);
        }
      }
      return null;
    }
  }

  private record Canned(int status, String body, Map<String, String> headers) {}

  final List<Seen> requests = new CopyOnWriteArrayList<>();
  private final ConcurrentLinkedQueue<Canned> answers = new ConcurrentLinkedQueue<>();
  private final HttpServer server;

  FakeServer() throws IOException {
    server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
    server.createContext("/", ex -> {
      String body = new String(ex.getRequestBody().readAllBytes(), StandardCharsets.UTF_8);
      requests.add(new Seen(ex.getRequestMethod(), ex.getRequestURI().getPath(),
          ex.getRequestURI().getRawPath(), Map.copyOf(ex.getRequestHeaders()), body));
      Canned c = answers.poll();
      if (c == null) {
        c = new Canned(500, "no answer queued", Map.of());
      }
      c.headers().forEach((k, v) -> ex.getResponseHeaders().add(k, v));
      byte[] out = c.body().getBytes(StandardCharsets.UTF_8);
      ex.sendResponseHeaders(c.status(), out.length);
      try (OutputStream os = ex.getResponseBody()) {
        os.write(out);
      }
    });
    server.start();
  }

  void answer(int status, String body, Map<String, String> headers) {
    answers.add(new Canned(status, body, headers));
  }

  String url() {
    return "http://127.0.0.1:" + server.getAddress().getPort();
  }

  Client client() {
    return new Client(url(), "token");
  }

  @Override
  public void close() {
    server.stop(0);
  }
}
