// HttpClientLoad.java -- N asynchronous GETs through one java.net.http.HttpClient (HTTP/1.1).
// Usage: java HttpClientLoad.java PORT N
// Prints one line: "ok K failed F codes NAME=n,... elapsed_ms E slowest_ms S", NAME being the
// failure's exception class (its cause's, when the client wrapped it).
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

public class HttpClientLoad {
    public static void main(String[] args) {
        int port = Integer.parseInt(args[0]), n = Integer.parseInt(args[1]);
        HttpClient client = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1)
                .connectTimeout(Duration.ofSeconds(10)).build();
        HttpRequest req = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/"))
                .timeout(Duration.ofSeconds(20)).build();
        AtomicInteger ok = new AtomicInteger(), failed = new AtomicInteger();
        AtomicLong slowest = new AtomicLong();
        Map<String, Integer> codes = new TreeMap<>();
        long t0 = System.nanoTime();
        List<CompletableFuture<Void>> all = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            long start = System.nanoTime();
            all.add(client.sendAsync(req, HttpResponse.BodyHandlers.ofString()).handle((r, e) -> {
                slowest.accumulateAndGet((System.nanoTime() - start) / 1000000, Math::max);
                if (e == null && r.statusCode() == 200 && r.body().equals("ok\n")) {
                    ok.incrementAndGet();
                    return null;
                }
                failed.incrementAndGet();
                Throwable t = e instanceof CompletionException && e.getCause() != null ? e.getCause() : e;
                String name = t == null ? "HTTP" + r.statusCode() : t.getClass().getSimpleName();
                synchronized (codes) { codes.merge(name, 1, Integer::sum); }
                return null;
            }));
        }
        CompletableFuture.allOf(all.toArray(new CompletableFuture[0])).join();
        StringBuilder c = new StringBuilder();
        for (Map.Entry<String, Integer> en : codes.entrySet())
            c.append(c.length() > 0 ? "," : "").append(en.getKey()).append('=').append(en.getValue());
        System.out.println("ok " + ok + " failed " + failed + " codes " + (c.length() > 0 ? c : "-")
                + " elapsed_ms " + (System.nanoTime() - t0) / 1000000 + " slowest_ms " + slowest);
        System.exit(0);
    }
}
