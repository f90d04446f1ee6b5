<?php
// php_curl.php -- GETs with php-curl (libcurl, loaded by PHP with RTLD_DEEPBIND).
// Usage: php php_curl.php multi URL N   N transfers at once through one curl_multi handle
//        php php_curl.php exec URL      one curl_exec
// Prints one line: "ok K failed F codes NAME=n,... elapsed_ms E slowest_ms S", NAME being
// the HTTP code or curl's error number of a failed transfer (tests/lib/realclient.sh).
function handle($url) {
    $h = curl_init($url);
    curl_setopt($h, CURLOPT_RETURNTRANSFER, true);
    curl_setopt($h, CURLOPT_TIMEOUT, 50);
    curl_setopt($h, CURLOPT_FORBID_REUSE, true);
    return $h;
}
function report($hs, $t0, $slowest) {
    $ok = 0; $codes = [];
    foreach ($hs as $h) {
        $c = curl_getinfo($h, CURLINFO_HTTP_CODE);
        if ($c == 200) { $ok++; continue; }
        $k = $c ? "http$c" : "curl" . curl_errno($h);
        $codes[$k] = ($codes[$k] ?? 0) + 1;
    }
    $list = [];
    foreach ($codes as $k => $n) $list[] = "$k=$n";
    printf("ok %d failed %d codes %s elapsed_ms %d slowest_ms %d\n", $ok, count($hs) - $ok,
           $list ? implode(",", $list) : "-", (int)((microtime(true) - $t0) * 1000), (int)($slowest * 1000));
}
$t0 = microtime(true);
if ($argv[1] === "multi") {
    $mh = curl_multi_init();
    $hs = [];
    for ($i = 0; $i < (int)$argv[3]; $i++) {
        $hs[] = $h = handle($argv[2] . "?i=$i");
        curl_multi_add_handle($mh, $h);
    }
    do {
        $st = curl_multi_exec($mh, $running);
        if ($running) curl_multi_select($mh, 1.0);
    } while ($running && $st == CURLM_OK);
    $slowest = 0;
    foreach ($hs as $h) $slowest = max($slowest, curl_getinfo($h, CURLINFO_TOTAL_TIME));
    report($hs, $t0, $slowest);
} else {
    $h = handle($argv[2]);
    curl_exec($h);
    report([$h], $t0, curl_getinfo($h, CURLINFO_TOTAL_TIME));
}
