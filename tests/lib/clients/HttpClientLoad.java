// HttpClientLoad.java -- N asynchronous GETs through one java.net.http.HttpClient (HTTP/1.1).
// Usage: java HttpClientLoad.java PORT N [--connect-timeout S] [--probe FREE_PORT]
// Prints one line: "ok K failed F codes NAME=n,... elapsed_ms E slowest_ms S", NAME being the
// failure's exception class (its cause's, when the client wrapped it). The client's connect
// timeout is S seconds (default 10); every request's timeout is S + 10 seconds.
// With --probe, a timer ticks every 50 ms for the whole run, and 500 ms in one more GET goes to
// 127.0.0.1:FREE_PORT (an uncapped upstream) through the same client (its one selector thread);
// stderr gets "probe free_ms F pending P ticks K maxgap_ms G" (tests/lib/realclient.sh).
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
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

public class HttpClientLoad {
    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]), n = Integer.parseInt(args[1]);
        int connectTimeout = 10, freePort = 0;
        for (int i = 2; i + 1 < args.length; i += 2) {
            if (args[i].equals("--connect-timeout")) connectTimeout = Integer.parseInt(args[i + 1]);
            else if (args[i].equals("--probe")) freePort = Integer.parseInt(args[i + 1]);
            else throw new IllegalArgumentException(args[i]);
        }
        HttpClient client = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1)
                .connectTimeout(Duration.ofSeconds(connectTimeout)).build();
        HttpRequest req = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/"))
                .timeout(Duration.ofSeconds(connectTimeout + 10)).build();
        AtomicInteger ok = new AtomicInteger(), failed = new AtomicInteger();
        AtomicLong slowest = new AtomicLong();
        Map<String, Integer> codes = new TreeMap<>();
        long t0 = System.nanoTime();
        AtomicLong last = new AtomicLong(t0), gap = new AtomicLong(), ticks = new AtomicLong();
        AtomicLong free = new AtomicLong(-1), pending = new AtomicLong();
        ScheduledExecutorService timer = Executors.newSingleThreadScheduledExecutor();
        CompletableFuture<Void> probe = CompletableFuture.completedFuture(null);
        if (freePort > 0) {
            timer.scheduleAtFixedRate(() -> {
                long now = System.nanoTime();
                ticks.incrementAndGet();
                gap.accumulateAndGet((now - last.getAndSet(now)) / 1000000, Math::max);
            }, 50, 50, TimeUnit.MILLISECONDS);
            HttpRequest freeReq = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + freePort + "/"))
                    .timeout(Duration.ofSeconds(10)).build();
            probe = new CompletableFuture<>();
            CompletableFuture<Void> p = probe;
            timer.schedule(() -> {
                pending.set(n - ok.get() - failed.get());
                long start = System.nanoTime();
                client.sendAsync(freeReq, HttpResponse.BodyHandlers.ofString()).handle((r, e) -> {
                    if (e == null && r.statusCode() == 200) free.set((System.nanoTime() - start) / 1000000);
                    p.complete(null);
                    return null;
                });
            }, 500, TimeUnit.MILLISECONDS);
        }
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
        long elapsed = (System.nanoTime() - t0) / 1000000;
        probe.join();
        timer.shutdownNow();
        if (freePort > 0)
            System.err.println("probe free_ms " + free + " pending " + pending + " ticks " + ticks + " maxgap_ms " + gap);
        StringBuilder c = new StringBuilder();
        for (Map.Entry<String, Integer> en : codes.entrySet())
            c.append(c.length() > 0 ? "," : "").append(en.getKey()).append('=').append(en.getValue());
        System.out.println("ok " + ok + " failed " + failed + " codes " + (c.length() > 0 ? c : "-")
                + " elapsed_ms " + elapsed + " slowest_ms " + slowest);
        System.exit(0);
    }
}
